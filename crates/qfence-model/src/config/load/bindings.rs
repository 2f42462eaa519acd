//! A plan's bindings: controller, capability, resource, role, params, checked against the
//! capability catalog.

use std::collections::BTreeMap;

use super::read::Fields;
use super::{Decoder, child, index, list_names};
use crate::catalog::{CapabilitySpec, ControllerType, Params};
use crate::config::tree::Node;
use crate::config::{Binding, ControllerConfig, keys};
use crate::domain::{FenceLevel, Role};
use crate::ids::{BindingId, ControllerId, SiteId};

impl Decoder {
    pub(super) fn bindings(
        &mut self,
        node: &Node,
        path: &str,
        site: Option<&SiteId>,
        plan_sites: &[SiteId],
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<Vec<Binding>> {
        let items = self.list(node, path, "bindings");
        let mut out: Vec<Binding> = Vec::new();
        let mut ok = true;
        let mut firsts: Vec<(usize, &Binding)> = Vec::new();
        let decoded: Vec<Option<Binding>> = items
            .iter()
            .enumerate()
            .map(|(i, item)| self.binding(item, &index(path, i), site, plan_sites, controllers))
            .collect();
        for (i, b) in decoded.iter().enumerate() {
            let Some(b) = b else {
                ok = false;
                continue;
            };
            let same = firsts.iter().find(|(_, f)| {
                f.controller == b.controller
                    && f.capability == b.capability
                    && f.resource == b.resource
                    && f.role == b.role
            });
            if let Some((j, _)) = same {
                self.error(
                    &index(path, i),
                    format!("duplicate binding: the same as [{j}]"),
                );
                ok = false;
                continue;
            }
            // Two bindings of one list may not share a stable id (named alike, or derived
            // from the same content), whichever way it came.
            let id = b.stable_id();
            if let Some((j, _)) = firsts.iter().find(|(_, f)| f.stable_id() == id) {
                let at = if b.id.is_some() {
                    child(&index(path, i), "id")
                } else {
                    index(path, i)
                };
                self.error(
                    &at,
                    format!("duplicate binding id \"{id}\": the same as [{j}]'s"),
                );
                ok = false;
                continue;
            }
            firsts.push((i, b));
        }
        for b in decoded.into_iter().flatten() {
            out.push(b);
        }
        ok.then_some(out)
    }

    fn binding(
        &mut self,
        node: &Node,
        path: &str,
        site: Option<&SiteId>,
        plan_sites: &[SiteId],
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) -> Option<Binding> {
        let f = self.fields(node, path, keys::BINDING)?;
        let id = match f.get("id") {
            None => Some(None),
            Some(n) => self
                .name::<BindingId>(n, &f.path("id"), "a binding id")
                .map(Some),
        };
        let controller = self
            .require(&f, "controller", "the controller to act through")
            .and_then(|n| self.controller_ref(n, &f.path("controller")));
        let roles: Vec<(&str, Role)> = Role::ALL.iter().map(|r| (r.as_str(), *r)).collect();
        let role = self
            .require(&f, "role", "the binding's role")
            .and_then(|n| self.word(n, &f.path("role"), "role", &roles));
        let capability = self
            .require(&f, "capability", "the capability to use")
            .and_then(|n| self.text(n, &f.path("capability"), "a capability name"));
        let resource = self
            .require(&f, "resource", "the resource the capability acts on")
            .and_then(|n| self.text(n, &f.path("resource"), "a resource name"));
        let required = self.opt(&f, "required", false, Self::boolean);
        let params = match f.get("params") {
            None => Some(BTreeMap::new()),
            Some(n) => self.string_map(n, &f.path("params"), "capability parameters"),
        };
        let b = Parts {
            controller,
            capability,
            resource,
            role,
            required,
            params,
        };
        if let Some(role) = b.role {
            self.check_placement(&f, site, role, b.required);
        }
        self.check_capability(&f, &b, plan_sites, controllers);
        Some(Binding {
            controller: b.controller?,
            capability: b.capability?,
            resource: b.resource?,
            role: b.role?,
            required: b.required?,
            params: b.params?,
            id: id?,
        })
    }

    /// A reference to a declared controller (one that failed to decode counts as declared).
    fn controller_ref(&mut self, n: &Node, p: &str) -> Option<ControllerId> {
        let id: ControllerId = self.name(n, p, "a controller name")?;
        if !self.declared_controllers.contains(id.as_str()) {
            let names = list_names(self.declared_controllers.iter().map(String::as_str));
            self.error(
                p,
                format!("unknown controller \"{id}\"; controllers: {names}"),
            );
            return None;
        }
        Some(id)
    }

    /// Where the binding sits (a site's instance or the service list) must fit its role.
    fn check_placement(
        &mut self,
        f: &Fields<'_>,
        site: Option<&SiteId>,
        role: Role,
        required: Option<bool>,
    ) {
        let rp = f.path("role");
        match site {
            Some(site) if role == Role::Service => self.error(
                &rp,
                format!(
                    "a service binding follows whichever site owns the plan: move it from \
                     the instance at {site} to the plan's service list"
                ),
            ),
            None if role != Role::Service => self.error(
                &rp,
                format!(
                    "only service bindings belong in the plan's service list; a {role} \
                     binding belongs in a site's instance"
                ),
            ),
            _ => {}
        }
        if required == Some(true) && role != Role::Fence {
            self.error(
                &f.path("required"),
                format!("only fence bindings can be required; this one is {role}"),
            );
        }
    }

    /// The capability, from the controller's type, decides the rest. A controller that
    /// failed to decode still has its type checked against, so the binding's own mistakes
    /// are reported in the same run.
    fn check_capability(
        &mut self,
        f: &Fields<'_>,
        b: &Parts,
        plan_sites: &[SiteId],
        controllers: &BTreeMap<ControllerId, ControllerConfig>,
    ) {
        let controller_config = b.controller.as_ref().and_then(|c| controllers.get(c));
        let controller_type = b
            .controller
            .as_ref()
            .and_then(|c| self.controller_types.get(c.as_str()).copied());
        let spec: Option<&'static CapabilitySpec> =
            match (&b.controller, controller_type, &b.capability) {
                (Some(cid), Some(ty), Some(name)) => match ty.capability(name) {
                    Some(spec) => Some(spec),
                    None => {
                        self.error(
                            &f.path("capability"),
                            format!(
                                "{name:?} is not a capability of controller {:?} ({ty}): {}",
                                cid.as_str(),
                                ty.capability_names()
                            ),
                        );
                        None
                    }
                },
                _ => None,
            };
        let (Some(spec), Some(ty)) = (spec, controller_type) else {
            return;
        };
        let level = controller_config.map_or(spec.level, |c| c.fence_level(spec));
        if let Some(role) = b.role
            && !spec.allows(role)
        {
            self.error(
                &f.path("role"),
                format!(
                    "{} may not take the role {role}; it takes: {}",
                    spec.name,
                    spec.role_names()
                ),
            );
        }
        if b.required == Some(true)
            && b.role == Some(Role::Fence)
            && level == Some(FenceLevel::Application)
        {
            self.error(
                &f.path("required"),
                format!(
                    "{} is an application fence, which never proves a site stopped: it can \
                     only be a secondary fence (remove required, and require a compute or \
                     network fence)",
                    spec.name
                ),
            );
        }
        if let Some(r) = &b.resource
            && !spec.resource.accepts(r)
        {
            self.error(
                &f.path("resource"),
                format!(
                    "{r:?} is not a valid resource for {}: expected a {}",
                    spec.name,
                    spec.resource.describe()
                ),
            );
        }
        if let Some(params) = &b.params {
            self.check_params(&f.path("params"), ty, spec, params, plan_sites);
        }
    }

    /// Checks a binding's `params:` against what the catalog declares for its capability.
    fn check_params(
        &mut self,
        path: &str,
        ty: ControllerType,
        spec: &CapabilitySpec,
        params: &BTreeMap<String, String>,
        plan_sites: &[SiteId],
    ) {
        match spec.params {
            Params::PerSite(site_param) => {
                for (k, v) in params {
                    let p = child(path, k);
                    if !plan_sites.iter().any(|s| s.as_str() == k) {
                        self.error(
                            &p,
                            format!(
                                "{} takes one value per plan site ({}); {k:?} is not \
                                 one of them: {}",
                                spec.name,
                                site_param.meaning,
                                list_names(plan_sites.iter().map(SiteId::as_str))
                            ),
                        );
                    } else if !site_param.ty.accepts(v) {
                        self.error(&p, format!("{v:?} is not {}", site_param.ty.describe()));
                    }
                }
                let missing: Vec<&str> = plan_sites
                    .iter()
                    .map(SiteId::as_str)
                    .filter(|s| !params.contains_key(*s))
                    .collect();
                if !missing.is_empty() {
                    self.error(
                        path,
                        format!(
                            "{} needs one value per plan site ({}); missing: {}",
                            spec.name,
                            site_param.meaning,
                            missing.join(", ")
                        ),
                    );
                }
            }
            Params::Named(known) => {
                for (k, v) in params {
                    let p = child(path, k);
                    match known.iter().find(|d| d.name == k) {
                        None if known.is_empty() => {
                            self.error(
                                &p,
                                format!("unknown param {k:?}; {} takes no params", spec.name),
                            );
                        }
                        None => self.error(
                            &p,
                            format!(
                                "unknown param {k:?}; {} ({ty}) takes: {}",
                                spec.name,
                                spec.params.names()
                            ),
                        ),
                        Some(d) if !d.ty.accepts(v) => {
                            self.error(&p, format!("expected {}, found {v:?}", d.ty.describe()));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
}

/// A binding's values as read; `None` where a value was refused.
struct Parts {
    controller: Option<ControllerId>,
    capability: Option<String>,
    resource: Option<String>,
    role: Option<Role>,
    required: Option<bool>,
    params: Option<BTreeMap<String, String>>,
}
