#!/usr/bin/env python3
"""The same Nova script against two clouds, for the fidelity check of qfence's simulator.

Our own code; it uses openstacksdk (an independent client) and prints one JSON line per
call: {"call", "status", "keys", "need", "facts"}. `keys` are the answer's field names,
`need` those qfence's driver reads (they must exist in both clouds), `facts` values that
must be the same in both (states, codes, what moved where). Run with the nova venv's
python:

    fidelity.py --auth-url URL --cacert CA --password PW --member-password PW \\
        --image ID --hosts compute-1,compute-2,compute-3

It boots one server, locks and unlocks it, disables and enables a host, forces the host
down and evacuates the server from it, follows the migration record, then deletes the
server. It leaves the host forced down with a `done` record (only a restart of the host's
nova-compute clears it): the caller resets the cloud afterwards.
"""
import argparse
import json
import sys
import time
import uuid

import openstack
from keystoneauth1 import exceptions as ksa_exc

OUT = []


def emit(call, resp=None, status=None, obj=None, need=(), **facts):
    if resp is not None:
        status = resp.status_code
        try:
            obj = resp.json() if resp.content else {}
        except ValueError:
            obj = {"_text": resp.text[:200]}
    keys = sorted(obj.keys()) if isinstance(obj, dict) else []
    missing = [k for k in need if not isinstance(obj, dict) or k not in obj]
    line = {"call": call, "status": status, "keys": keys, "need": list(need),
            "missing": missing, "facts": facts}
    OUT.append(line)
    print(json.dumps(line, sort_keys=True), flush=True)
    return obj


def connect(a, user, password, project):
    return openstack.connect(
        auth_url=a.auth_url, username=user, password=password, project_name=project,
        user_domain_name="Default", project_domain_name="Default", cacert=a.cacert,
        region_name=a.region, identity_interface="public")


def mv(v):
    return {"OpenStack-API-Version": "compute %s" % v}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--auth-url", required=True)
    ap.add_argument("--cacert", required=True)
    ap.add_argument("--region", default="RegionOne")
    ap.add_argument("--password", required=True)
    ap.add_argument("--member-password", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--hosts", required=True)
    a = ap.parse_args()
    hosts = a.hosts.split(",")
    src = hosts[0]
    c = connect(a, "admin", a.password, "admin")
    nova = c.compute

    # Identity: a token scoped to the project, with a catalog naming compute and image.
    c.authorize()
    emit("token", status=201, obj={}, compute=bool(nova.get_endpoint()),
         image=bool(c.image.get_endpoint()))
    try:
        connect(a, "admin", "not-the-password", "admin").authorize()
        emit("token with a wrong password", status=201)
    except (ksa_exc.Unauthorized, openstack.exceptions.SDKException) as e:
        emit("token with a wrong password", status=401 if "401" in str(e) else str(e))

    v = emit("GET / (version document)", nova.get("/", raise_exc=False),
             need=("version",))
    doc = v.get("version", {})
    emit("version document fields", status=200, obj=doc,
         need=("id", "min_version", "version"), id=doc.get("id"),
         min_version=doc.get("min_version"))

    # Services (2.53), high level too.
    r = nova.get("/os-services?binary=nova-compute", headers=mv("2.53"), raise_exc=False)
    svcs = emit("GET /os-services 2.53", r, need=("services",)).get("services", [])
    by_host = {s["host"]: s for s in svcs}
    emit("a service at 2.53", status=200, obj=by_host.get(src, {}),
         need=("id", "binary", "host", "state", "status", "forced_down",
               "disabled_reason", "updated_at", "zone"),
         state=by_host.get(src, {}).get("state"), status_=by_host.get(src, {}).get("status"),
         forced_down=by_host.get(src, {}).get("forced_down"))
    r = nova.get("/os-services?binary=nova-compute", headers=mv("2.10"), raise_exc=False)
    old = emit("GET /os-services 2.10", r).get("services", [{}])
    emit("a service at 2.10", status=200, obj=old[0] if old else {},
         has_forced_down="forced_down" in (old[0] if old else {}),
         id_is_int=isinstance((old[0] if old else {}).get("id"), int))
    hl = [s for s in nova.services() if s.binary == "nova-compute"]
    emit("sdk services()", status=200, obj={},
         hosts=sorted(s.host for s in hl if s.host in hosts),
         forced_down_known=all(s.is_forced_down is not None for s in hl))
    sid = by_host[src]["id"]

    member = connect(a, "demo", a.member_password, "demo")
    r = member.compute.get("/os-services", headers=mv("2.53"), raise_exc=False)
    emit("GET /os-services as a member", r)

    # A server on the source host (2.74 host), ACTIVE.
    body = {"server": {"name": "fidelity", "imageRef": a.image, "flavorRef": "1",
                       "networks": "none", "host": src}}
    r = nova.post("/servers", json=body, headers=mv("2.74"), raise_exc=False)
    sv = emit("POST /servers 2.74", r, need=("server",)).get("server", {})
    server = sv.get("id")
    for _ in range(240):
        s = nova.get("/servers/%s" % server, headers=mv("2.73"), raise_exc=False).json()
        if s.get("server", {}).get("status") in ("ACTIVE", "ERROR"):
            break
        time.sleep(0.25)
    r = nova.get("/servers/%s" % server, headers=mv("2.73"), raise_exc=False)
    s = emit("GET /servers/{id} 2.73", r, need=("server",)).get("server", {})
    emit("server fields at 2.73", status=200, obj=s,
         need=("id", "name", "status", "OS-EXT-STS:task_state", "OS-EXT-STS:vm_state",
               "OS-EXT-SRV-ATTR:host", "flavor", "image", "locked", "locked_reason",
               "tenant_id", "metadata"),
         status_=s.get("status"), on_source=s.get("OS-EXT-SRV-ATTR:host") == src,
         locked=s.get("locked"))
    emit("embedded flavor at 2.73", status=200, obj=s.get("flavor", {}),
         need=("original_name", "vcpus", "ram", "disk", "extra_specs"),
         evacuable=s.get("flavor", {}).get("extra_specs", {}).get("evacuable"))
    r = nova.get("/servers/%s" % server, headers=mv("2.46"), raise_exc=False)
    s46 = emit("GET /servers/{id} 2.46", r).get("server", {})
    emit("flavor at 2.46", status=200, obj=s46.get("flavor", {}),
         has_id="id" in s46.get("flavor", {}), has_locked_reason="locked_reason" in s46)
    r = nova.get("/servers/detail?all_tenants=1&host=%s" % src, headers=mv("2.73"),
                 raise_exc=False)
    listed = emit("GET /servers/detail?host= 2.73", r, need=("servers",)).get("servers", [])
    emit("servers on the host", status=200, obj={},
         found=[x["id"] for x in listed].count(server),
         all_on_host=all(x.get("OS-EXT-SRV-ATTR:host") == src for x in listed))
    sdk = nova.get_server(server)
    emit("sdk get_server()", status=200, obj={}, host=sdk.compute_host == src,
         status_=sdk.status)

    # Lock with a reason (2.73) and unlock.
    r = nova.post("/servers/%s/action" % server, json={"lock": {"locked_reason": "qfence"}},
                  headers=mv("2.73"), raise_exc=False)
    emit("lock with a reason 2.73", r)
    r = nova.post("/servers/%s/action" % server, json={"lock": {"locked_reason": "x"}},
                  headers=mv("2.72"), raise_exc=False)
    emit("lock with a reason 2.72", r)
    s = nova.get("/servers/%s" % server, headers=mv("2.73")).json()["server"]
    emit("locked server", status=200, obj={}, locked=s["locked"], reason=s["locked_reason"])
    r = nova.post("/servers/%s/action" % server, json={"unlock": None}, raise_exc=False)
    emit("unlock", r)

    # Disable with a reason and enable (2.53).
    r = nova.put("/os-services/%s" % sid, json={"status": "disabled",
                 "disabled_reason": "qfence: fidelity"}, headers=mv("2.53"), raise_exc=False)
    d = emit("PUT /os-services/{id} disable", r, need=("service",)).get("service", {})
    emit("disabled service", status=200, obj=d, status_=d.get("status"),
         reason=d.get("disabled_reason"))
    r = nova.put("/os-services/%s" % sid, json={"status": "enabled"}, headers=mv("2.53"),
                 raise_exc=False)
    e = emit("PUT /os-services/{id} enable", r).get("service", {})
    emit("enabled service", status=200, obj={}, status_=e.get("status"),
         reason=e.get("disabled_reason"))
    r = nova.put("/os-services/%s" % uuid.uuid4(), json={"status": "enabled"},
                 headers=mv("2.53"), raise_exc=False)
    emit("PUT /os-services/{unknown id}", r)

    # Flavors (2.61), aggregates (2.41), the image's properties (Glance).
    r = nova.get("/flavors/detail", headers=mv("2.61"), raise_exc=False)
    fl = [f for f in emit("GET /flavors/detail 2.61", r).get("flavors", []) if f["id"] == "1"]
    emit("flavor 1 at 2.61", status=200, obj=fl[0] if fl else {},
         need=("id", "name", "vcpus", "ram", "disk", "extra_specs"),
         evacuable=(fl[0] if fl else {}).get("extra_specs", {}).get("evacuable"))
    r = nova.get("/os-aggregates", headers=mv("2.41"), raise_exc=False)
    ag = [x for x in emit("GET /os-aggregates 2.41", r).get("aggregates", [])
          if x["name"] == "ha-hosts"]
    emit("aggregate ha-hosts", status=200, obj=ag[0] if ag else {},
         need=("id", "uuid", "name", "hosts", "metadata"),
         evacuable=(ag[0] if ag else {}).get("metadata", {}).get("evacuable"))
    img = c.image.get_image(a.image)
    emit("sdk get_image()", status=200, obj={},
         evacuable=img.properties.get("evacuable") if img.properties else None)

    # Refusals.
    r = nova.get("/servers/%s" % uuid.uuid4(), headers=mv("2.73"), raise_exc=False)
    emit("GET /servers/{unknown}", r)
    r = nova.get("/os-services", headers=mv("2.200"), raise_exc=False)
    emit("microversion 2.200", r)
    r = nova.post("/servers/%s/action" % server, json={"evacuate": {}}, headers=mv("2.29"),
                  raise_exc=False)
    emit("evacuate from a host that is up", r)

    # Force down, evacuate (2.29), follow the record (2.59) to its end.
    r = nova.put("/os-services/%s" % sid, json={"forced_down": True}, headers=mv("2.53"),
                 raise_exc=False)
    f = emit("PUT /os-services/{id} forced_down", r).get("service", {})
    emit("forced-down service", status=200, obj={}, forced_down=f.get("forced_down"),
         state=f.get("state"))
    r = nova.post("/servers/%s/action" % server, json={"evacuate": {}}, headers=mv("2.29"),
                  raise_exc=False)
    emit("evacuate 2.29", r)
    rec = {}
    for _ in range(240):
        r = nova.get("/os-migrations?instance_uuid=%s&migration_type=evacuation" % server,
                     headers=mv("2.59"), raise_exc=False)
        ms = r.json().get("migrations", [])
        rec = ms[0] if ms else {}
        if rec.get("status") in ("done", "completed", "error", "failed"):
            break
        time.sleep(0.25)
    emit("evacuation record 2.59", status=r.status_code, obj=rec,
         need=("id", "uuid", "instance_uuid", "migration_type", "status", "source_compute",
               "dest_compute", "created_at", "updated_at"),
         status_=rec.get("status"), type=rec.get("migration_type"),
         source=rec.get("source_compute") == src, moved=rec.get("dest_compute") not in (None, src))
    for _ in range(120):
        s = nova.get("/servers/%s" % server, headers=mv("2.73")).json()["server"]
        if s.get("OS-EXT-STS:task_state") is None:
            break
        time.sleep(0.25)
    emit("evacuated server", status=200, obj={}, status_=s["status"],
         moved=s.get("OS-EXT-SRV-ATTR:host") not in (None, src),
         task=s.get("OS-EXT-STS:task_state"))
    sdk_m = [m for m in nova.migrations(instance_uuid=server)]
    emit("sdk migrations()", status=200, obj={},
         statuses=sorted(m.status for m in sdk_m))
    r = nova.put("/os-services/%s" % sid, json={"forced_down": False}, headers=mv("2.53"),
                 raise_exc=False)
    emit("force up with done records", r)
    r = nova.delete("/servers/%s" % server, raise_exc=False)
    emit("DELETE /servers/{id}", r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
