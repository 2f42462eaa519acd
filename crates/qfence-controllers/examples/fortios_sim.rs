//! Runs the FortiOS REST simulator (qfence-lab) on loopback for trying a `fortigate`
//! controller by hand (`qfence controller test|discover`): HTTPS with a fresh self-signed
//! certificate, the example device (`FortiState::example`: policies 1 and 2, VIP `erp-vip`,
//! API keys `admin-key`, `fw-key`, `ro-key`). Prints the endpoint and the pin, then serves
//! until interrupted.
//!
//! `cargo run -p qfence-controllers --example fortios_sim -- [PORT]` (default 8445).

use std::net::SocketAddr;

use qfence_lab::LabTls;
use qfence_lab::fortios::{self, FortiState};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = match std::env::args().nth(1) {
        Some(p) => p.parse()?,
        None => 8445,
    };
    let tls = LabTls::self_signed(&["127.0.0.1", "localhost"])?;
    let pin = qfence_controllers::tls::fingerprint(&tls.cert_der);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let _sim = fortios::start(addr, Some(tls), FortiState::example()).await?;
    println!("FORTIOS_URL=https://{addr}");
    println!("FORTIOS_PIN={pin}");
    println!("FORTIOS_KEYS=admin-key,fw-key,ro-key");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
