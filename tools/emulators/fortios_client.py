"""Drives a FortiOS REST API (qfence's FortiOS simulator in CI) with fortiosapi, Fortinet's
own Python client written against real FortiGates, making the calls qfence's FortiGate driver
makes, and prints one JSON object: each call's name, HTTP status and the answer as fortiosapi
returned it. The Rust test (crates/qfence-lab/tests/lab/fidelity.rs) judges the answers.

    python fortios_client.py HOST:PORT CA_FILE API_KEY VDOM POLICY_ID VIP_NAME NEW_MAPPED_IP

CA_FILE is the certificate the device is verified with (the simulator's own).
"""

import json
import sys

import fortiosapi


def main():
    host, ca, key, vdom, policy, vip, mapped = sys.argv[1:8]
    calls = []

    def record(name, answer):
        # fortiosapi returns the decoded JSON, or the raw requests response when it is not.
        if isinstance(answer, dict):
            calls.append({"call": name, "answer": answer})
        else:
            calls.append({"call": name, "raw_status": answer.status_code,
                          "raw_body": answer.text[:400]})

    fgt = fortiosapi.FortiOSAPI()
    # tokenlogin reads cmdb/system/status (as every fortiosapi user's first call does) and
    # keeps its `version`.
    fgt.tokenlogin(host, key, verify=ca, vdom=vdom)
    calls.append({"call": "tokenlogin", "answer": {"version": fgt.get_version()}})
    record("monitor system/status", fgt.monitor("system", "status", vdom=vdom))
    record("monitor system/ha-checksums", fgt.monitor("system", "ha-checksums", vdom=vdom))
    record("cmdb firewall/policy", fgt.get("firewall", "policy", vdom=vdom))
    record("cmdb firewall/policy/{id}", fgt.get("firewall", "policy", vdom=vdom, mkey=policy))
    record("put firewall/policy/{id} disable",
           fgt.put("firewall", "policy", vdom=vdom, mkey=policy, data={"status": "disable"}))
    record("cmdb firewall/policy/{id} after disable",
           fgt.get("firewall", "policy", vdom=vdom, mkey=policy))
    record("put firewall/policy/{id} enable",
           fgt.put("firewall", "policy", vdom=vdom, mkey=policy, data={"status": "enable"}))
    record("cmdb firewall/vip", fgt.get("firewall", "vip", vdom=vdom))
    record("put firewall/vip/{name} mappedip",
           fgt.put("firewall", "vip", vdom=vdom, mkey=vip,
                   data={"mappedip": [{"range": mapped}], "status": "enable"}))
    record("cmdb firewall/vip/{name} after put", fgt.get("firewall", "vip", vdom=vdom, mkey=vip))
    record("put firewall/vip/{name} bad address",
           fgt.put("firewall", "vip", vdom=vdom, mkey=vip,
                   data={"mappedip": [{"range": "not-an-address"}]}))
    record("cmdb firewall/policy/{unknown}",
           fgt.get("firewall", "policy", vdom=vdom, mkey="999999"))
    record("cmdb system/settings", fgt.get("system", "settings", vdom=vdom))
    record("cmdb system/api-user", fgt.get("system", "api-user", vdom=vdom))
    record("cmdb system/accprofile", fgt.get("system", "accprofile", vdom=vdom))
    record("cmdb firewall/policy in an unknown vdom",
           fgt.get("firewall", "policy", vdom="no-such-vdom"))

    wrong = fortiosapi.FortiOSAPI()
    try:
        wrong.tokenlogin(host, "wrong-key", verify=ca, vdom=vdom)
        calls.append({"call": "tokenlogin with a wrong key", "answer": {"logged_in": True}})
    except Exception as e:  # fortiosapi raises NotLogged when the answer has no version
        calls.append({"call": "tokenlogin with a wrong key",
                      "answer": {"logged_in": False, "error": type(e).__name__}})
    record("monitor system/status with a wrong key",
           wrong.monitor("system", "status", vdom=vdom))
    print(json.dumps(calls))


if __name__ == "__main__":
    main()
