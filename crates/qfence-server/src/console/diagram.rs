//! A plan drawn as in the controllers-and-bindings guide: the plan, its instances (one per
//! site) and its service, each instance's bindings, the controllers they act through, and
//! the secrets those name (by reference only). Laid out here, in layers, as boxes and lines
//! for an inline SVG; the template only draws.

use std::collections::BTreeMap;

use serde_json::Value;

use qfence_runtime::dto::{ControllerView, PlanStatus, SiteRole, SiteStatus};

const BOX_W: u32 = 132;
const BOX_H: u32 = 58;
const GAP_X: u32 = 10;
const GAP_Y: u32 = 46;
const MARGIN: u32 = 10;

/// One box.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
    /// `plan`, `instance`, `service`, `binding`, `controller`, `secret`; instances also carry
    /// their verdict (`fenced`...) and `owner`.
    pub class: String,
    /// Up to three lines; the first is drawn bold.
    pub lines: Vec<String>,
    /// The full text, for the tooltip.
    pub title: String,
}

impl Node {
    pub fn cx(&self) -> u32 {
        self.x + self.w / 2
    }
    pub fn bottom(&self) -> u32 {
        self.y + self.h
    }
    /// The y of text line `i`.
    pub fn line_y(&self, i: &usize) -> u32 {
        self.y + 19 + 16 * (*i as u32)
    }
}

/// One line from a parent's bottom to a child's top.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    pub x1: u32,
    pub y1: u32,
    pub x2: u32,
    pub y2: u32,
}

/// The whole drawing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Diagram {
    pub width: u32,
    pub height: u32,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

struct Binding {
    /// Index of the parent (instance or service) box.
    parent: usize,
    controller: String,
    capability: String,
    role: String,
    required: bool,
    resource: String,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("?").to_owned()
}

fn layer_y(layer: u32) -> u32 {
    MARGIN + layer * (BOX_H + GAP_Y)
}

fn node(class: &str, lines: Vec<String>) -> Node {
    Node {
        x: 0,
        y: 0,
        w: BOX_W,
        h: BOX_H,
        class: class.to_owned(),
        title: lines.join(" · "),
        lines,
    }
}

/// Places `nodes` (by their index in `all`) at the wanted centres, left to right, never
/// closer than a box and a gap.
fn place(all: &mut [Node], ids: &[usize], wanted: &[f64], layer: u32) {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by(|a, b| wanted[*a].total_cmp(&wanted[*b]));
    let mut next_min = f64::from(MARGIN);
    for i in order {
        let left = (wanted[i] - f64::from(BOX_W) / 2.0).max(next_min);
        let n = &mut all[ids[i]];
        n.x = left.round() as u32;
        n.y = layer_y(layer);
        next_min = left + f64::from(BOX_W + GAP_X);
    }
}

/// Lays out `spec` (a plan as the configuration file writes it) with the controllers it names.
pub(crate) fn layout(
    plan: &str,
    spec: &Value,
    status: Option<&PlanStatus>,
    controllers: &[ControllerView],
) -> Diagram {
    let mut nodes = vec![plan_node(plan, status)];
    let (parents, bindings) = parent_nodes(&mut nodes, spec, status);
    let binding_ids = binding_nodes(&mut nodes, &bindings);
    place_parents(&mut nodes, &parents, &bindings, &binding_ids);
    let controllers = controller_nodes(&mut nodes, &bindings, &binding_ids, controllers);
    let secrets = secret_nodes(&mut nodes, &controllers.secrets);
    // The plan box over everything.
    let centre = parents
        .iter()
        .map(|p| f64::from(nodes[*p].cx()))
        .sum::<f64>()
        / parents.len().max(1) as f64;
    place(&mut nodes, &[0], &[centre.max(f64::from(BOX_W))], 0);

    let mut edges = Vec::new();
    let mut link = |from: usize, to: usize, nodes: &[Node]| {
        edges.push(Edge {
            x1: nodes[from].cx(),
            y1: nodes[from].bottom(),
            x2: nodes[to].cx(),
            y2: nodes[to].y,
        });
    };
    for p in &parents {
        link(0, *p, &nodes);
    }
    for (b, id) in bindings.iter().zip(&binding_ids) {
        link(b.parent, *id, &nodes);
    }
    // Controllers under their bindings, then secrets under their controllers.
    for (users_by_name, ids) in [
        (&controllers.used, &controllers.ids),
        (&controllers.secrets, &secrets),
    ] {
        for ((_, users), id) in users_by_name.iter().zip(ids) {
            for u in users {
                link(*u, *id, &nodes);
            }
        }
    }
    let width = nodes.iter().map(|n| n.x + n.w).max().unwrap_or(0) + MARGIN;
    let layers = if secrets.is_empty() { 4 } else { 5 };
    Diagram {
        width: width.max(BOX_W + 2 * MARGIN),
        height: layer_y(layers) - GAP_Y + MARGIN,
        nodes,
        edges,
    }
}

/// The plan's own box, with its owner when the status is known.
fn plan_node(plan: &str, status: Option<&PlanStatus>) -> Node {
    node(
        "plan",
        vec![
            "Plan".into(),
            plan.to_owned(),
            status
                .map(|s| format!("owner {}", s.owner))
                .unwrap_or_default(),
        ],
    )
}

/// Pushes one box per instance and one for the service (when it has bindings); returns their
/// indices and the bindings under them, in the order written.
fn parent_nodes(
    nodes: &mut Vec<Node>,
    spec: &Value,
    status: Option<&PlanStatus>,
) -> (Vec<usize>, Vec<Binding>) {
    let mut parents: Vec<usize> = Vec::new();
    let mut bindings: Vec<Binding> = Vec::new();
    let instances = spec.get("instances").and_then(Value::as_object);
    for (site, list) in instances.into_iter().flatten() {
        let site_status = status.and_then(|s| s.sites.iter().find(|x| &x.site == site));
        nodes.push(instance_node(site, site_status));
        let parent = nodes.len() - 1;
        parents.push(parent);
        for b in list.as_array().into_iter().flatten() {
            bindings.push(binding(parent, b));
        }
    }
    if let Some(service) = spec.get("service").and_then(Value::as_array)
        && !service.is_empty()
    {
        nodes.push(node(
            "service",
            vec!["Service".into(), "follows the owner".into()],
        ));
        let parent = nodes.len() - 1;
        parents.push(parent);
        for b in service {
            bindings.push(binding(parent, b));
        }
    }
    (parents, bindings)
}

/// An instance's box: its role and verdict when the status names the site.
fn instance_node(site: &str, site_status: Option<&SiteStatus>) -> Node {
    let mut n = node("instance", vec![format!("Instance at {site}")]);
    if let Some(ss) = site_status {
        let verdict = crate::console::verdict_class(&ss.verdict);
        n.lines.push(match ss.role {
            SiteRole::Owner => "owner".to_owned(),
            SiteRole::Standby => format!("standby · {}", verdict.to_uppercase()),
        });
        n.class = match ss.role {
            SiteRole::Owner => "instance owner".to_owned(),
            SiteRole::Standby => format!("instance {verdict}"),
        };
        if ss.maintenance {
            n.lines.push("in maintenance".into());
        }
    }
    n.title = n.lines.join(" · ");
    n
}

/// Bindings, left to right in the order written: the widest layer, it sets the width.
fn binding_nodes(nodes: &mut Vec<Node>, bindings: &[Binding]) -> Vec<usize> {
    let binding_ids: Vec<usize> = bindings
        .iter()
        .map(|b| {
            let mut n = node(
                "binding",
                vec![
                    b.capability.clone(),
                    if b.required {
                        format!("{}, required", b.role)
                    } else {
                        b.role.clone()
                    },
                    b.resource.clone(),
                ],
            );
            n.title = format!(
                "{} via {}: {} on {}{}",
                b.capability,
                b.controller,
                b.role,
                b.resource,
                if b.required { " (required)" } else { "" }
            );
            nodes.push(n);
            nodes.len() - 1
        })
        .collect();
    let step = f64::from(BOX_W + GAP_X);
    let wanted: Vec<f64> = (0..binding_ids.len())
        .map(|i| f64::from(MARGIN) + f64::from(BOX_W) / 2.0 + step * i as f64)
        .collect();
    place(nodes, &binding_ids, &wanted, 2);
    binding_ids
}

/// Instances and the service over their bindings.
fn place_parents(nodes: &mut [Node], parents: &[usize], bindings: &[Binding], ids: &[usize]) {
    let wanted: Vec<f64> = parents
        .iter()
        .map(|p| {
            let xs: Vec<f64> = bindings
                .iter()
                .zip(ids)
                .filter(|(b, _)| b.parent == *p)
                .map(|(_, id)| f64::from(nodes[*id].cx()))
                .collect();
            if xs.is_empty() {
                0.0
            } else {
                xs.iter().sum::<f64>() / xs.len() as f64
            }
        })
        .collect();
    place(nodes, parents, &wanted, 1);
}

/// The controllers' layer: which boxes use each controller and each secret.
struct ControllerLayer {
    /// Controller name to the binding boxes that use it.
    used: BTreeMap<String, Vec<usize>>,
    /// The controllers' boxes, in the order of `used`.
    ids: Vec<usize>,
    /// Secret name to the controller boxes that name it.
    secrets: BTreeMap<String, Vec<usize>>,
}

/// The mean centre of `users`' boxes: where a box under them wants to stand.
fn mean_cx(nodes: &[Node], users: &[usize]) -> f64 {
    users.iter().map(|u| f64::from(nodes[*u].cx())).sum::<f64>() / users.len() as f64
}

/// Controllers under the bindings that use them.
fn controller_nodes(
    nodes: &mut Vec<Node>,
    bindings: &[Binding],
    binding_ids: &[usize],
    controllers: &[ControllerView],
) -> ControllerLayer {
    let mut used: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (b, id) in bindings.iter().zip(binding_ids) {
        used.entry(b.controller.clone()).or_default().push(*id);
    }
    let mut ids = Vec::new();
    let mut wanted = Vec::new();
    let mut secrets: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (name, users) in &used {
        let view = controllers.iter().find(|c| &c.name == name);
        let mut n = node(
            "controller",
            vec![
                "Controller".into(),
                name.clone(),
                view.map(|c| format!("{} · {}", c.controller_type, c.site))
                    .unwrap_or_else(|| "not registered".into()),
            ],
        );
        if view.is_none() {
            n.class = "controller missing".into();
        }
        nodes.push(n);
        let id = nodes.len() - 1;
        ids.push(id);
        wanted.push(mean_cx(nodes, users));
        if let Some(secret) = view.and_then(|c| c.secret.clone()) {
            secrets.entry(secret).or_default().push(id);
        }
    }
    place(nodes, &ids, &wanted, 3);
    ControllerLayer { used, ids, secrets }
}

/// Secrets under their controllers; returns their boxes, in the order of `secrets`.
fn secret_nodes(nodes: &mut Vec<Node>, secrets: &BTreeMap<String, Vec<usize>>) -> Vec<usize> {
    let mut ids = Vec::new();
    let mut wanted = Vec::new();
    for (name, users) in secrets {
        nodes.push(node("secret", vec!["Secret".into(), name.clone()]));
        ids.push(nodes.len() - 1);
        wanted.push(mean_cx(nodes, users));
    }
    place(nodes, &ids, &wanted, 4);
    ids
}

fn binding(parent: usize, b: &Value) -> Binding {
    Binding {
        parent,
        controller: text(b, "controller"),
        capability: text(b, "capability"),
        role: text(b, "role"),
        required: b.get("required").and_then(Value::as_bool).unwrap_or(false),
        resource: b
            .get("resource")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_lab_plan_is_drawn_in_five_layers_without_overlaps() {
        let spec = json!({
            "owner": "dc1",
            "instances": {
                "dc1": [{"controller": "bmc-dc1", "capability": "power.off", "resource": "h1", "role": "fence", "required": true},
                        {"controller": "pve-dc1", "capability": "vm.stop", "resource": "h1/101", "role": "fence"}],
                "dc2": [{"controller": "bmc-dc2", "capability": "power.off", "resource": "h2", "role": "fence", "required": true}]
            },
            "service": [{"controller": "fgt-edge", "capability": "vip.own", "resource": "vip", "role": "service"}]
        });
        let c = |name: &str, secret: &str| ControllerView {
            name: name.into(),
            controller_type: "redfish".into(),
            site: "dc1".into(),
            reach: vec![],
            secret: Some(secret.into()),
            grades: vec![],
            tested_at_ms: None,
            identity: None,
        };
        let controllers = [
            c("bmc-dc1", "lab-redfish"),
            c("bmc-dc2", "lab-redfish"),
            c("pve-dc1", "lab-proxmox"),
        ];
        let d = layout("erp-db", &spec, None, &controllers);
        let count = |class: &str| {
            d.nodes
                .iter()
                .filter(|n| n.class.starts_with(class))
                .count()
        };
        assert_eq!(count("plan"), 1);
        assert_eq!(count("instance"), 2);
        assert_eq!(count("service"), 1);
        assert_eq!(count("binding"), 4);
        assert_eq!(count("controller"), 4);
        assert_eq!(
            count("controller missing"),
            1,
            "fgt-edge is not among the controllers"
        );
        assert_eq!(
            count("secret"),
            2,
            "a secret shared by two controllers is drawn once"
        );
        // 3 (plan) + 4 (bindings) + 4 (to controllers) + 3 (to secrets)
        assert_eq!(d.edges.len(), 3 + 4 + 4 + 3);
        for a in &d.nodes {
            for b in &d.nodes {
                if std::ptr::eq(a, b) || a.y != b.y {
                    continue;
                }
                assert!(a.x + a.w <= b.x || b.x + b.w <= a.x, "{a:?} overlaps {b:?}");
            }
            assert!(
                a.x + a.w <= d.width && a.y + a.h <= d.height,
                "{a:?} is inside"
            );
        }
    }
}
