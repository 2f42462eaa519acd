use qfence_model::ControllerType;
use qfence_model::config::keys;
use serde_json::json;

use super::form::*;
use super::list::*;
use super::page::*;

#[test]
fn every_controller_key_has_a_field() {
    let typed = ControllerType::ALL
        .into_iter()
        .flat_map(keys::controller_type);
    for k in keys::CONTROLLER.iter().chain(typed) {
        // `tls` is chosen by tls_mode and its own fields.
        let field = if *k == "tls" { "tls_mode" } else { k };
        assert!(FIELDS.iter().any(|(f, _)| *f == field), "no field for {k}");
        let per_type = TYPE_FIELDS.iter().any(|(f, _, _)| f == k);
        assert_eq!(
            per_type,
            !keys::CONTROLLER.contains(k) && *k != "tls",
            "{k}"
        );
    }
}

#[test]
fn pasted_credentials_are_told_apart_from_names() {
    assert!(looks_inline("3f1c2d9e-8a7b-4c6d-9e0f-1a2b3c4d5e6f").is_some());
    assert!(looks_inline("Xk29fLq0Pz7RtY3mWn8Bv").is_some());
    assert!(looks_inline("lab-redfish").is_none());
    assert!(looks_inline("bmc_dc1.password-ref").is_none());
    assert!(looks_inline("").is_none());
}

#[test]
fn issue_paths_name_fields_and_steps() {
    assert_eq!(
        field_of("controllers.bmc-x.secret", "bmc-x").as_deref(),
        Some("secret")
    );
    assert_eq!(
        field_of("controllers.bmc-x.tls.pin", "bmc-x").as_deref(),
        Some("tls")
    );
    assert_eq!(
        field_of("controllers.bmc-x.reach[1]", "bmc-x").as_deref(),
        Some("reach")
    );
    assert_eq!(field_of("controllers.bmc-x", "bmc-x"), None);
    assert_eq!(step_of("secret"), 2);
    assert_eq!(step_of("endpoint"), 1);
    assert_eq!(step_of("tls"), 1);
}

#[test]
fn the_spec_has_only_the_chosen_types_fields() {
    let f = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    let form = ControllerForm::from_fields(&[
        f("name", "bmc-x"),
        f("type", "redfish"),
        f("site", "dc1"),
        f("reach", "dc2"),
        f("endpoint", "https://127.0.0.1:9443"),
        f("username", "qfence"),
        f("token_id", "left@over!typed"),
        f("tls_mode", "insecure"),
        f("secret", "lab-redfish"),
    ]);
    let (spec, issues) = form.to_spec();
    assert!(issues.is_empty());
    assert_eq!(
        spec,
        json!({"type": "redfish", "site": "dc1", "reach": ["dc2"], "secret": "lab-redfish",
               "endpoint": "https://127.0.0.1:9443", "username": "qfence",
               "tls": {"insecure": true}})
    );
    // Hidden at step 2: everything but the secret, the left-over field included.
    let hidden = form.hidden(2);
    assert!(
        hidden
            .iter()
            .any(|(k, v)| k == "token_id" && v == "left@over!typed")
    );
    assert!(!hidden.iter().any(|(k, _)| k == "secret"));
}

#[test]
fn a_ticked_pin_replaces_the_tls_choice() {
    let f = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    let form = ControllerForm::from_fields(&[
        f("type", "redfish"),
        f("tls_mode", "insecure"),
        f("probed_fingerprint", "sha256:ab"),
        f("pin_fingerprint", "true"),
    ]);
    assert_eq!(form.to_spec().0["tls"], json!({"pin": "sha256:ab"}));
}

#[test]
fn a_refused_certificate_is_offered_to_pin() {
    let hex = "efd3340406fdc63b214dac9252937feff14944e142bf5330675e0a99a4ea56ec";
    let note = format!(
        "certificate not trusted (invalid peer certificate: UnknownIssuer); it shows \
         sha256:{hex}, which can be pinned with tls: {{pin: \"sha256:{hex}\"}}"
    );
    assert_eq!(shown_fingerprint(&note), Some(format!("sha256:{hex}")));
    assert_eq!(shown_fingerprint("it shows sha256:abc"), None);
    assert_eq!(shown_fingerprint("connection refused"), None);
}

#[test]
fn passwords_are_taken_out_of_endpoints() {
    assert_eq!(
        without_password("https://qfence:hunter2@127.0.0.1:9443/redfish").as_deref(),
        Some("https://qfence@127.0.0.1:9443/redfish")
    );
    assert_eq!(without_password("https://qfence@127.0.0.1:9443"), None);
    assert_eq!(without_password("https://127.0.0.1:9443"), None);
}

#[test]
fn times_are_utc() {
    assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
}
