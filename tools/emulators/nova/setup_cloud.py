#!/usr/bin/env python3
"""Idempotent set-up steps of the Nova test peer (our own code; uses openstacksdk).

Run with the venv's python. Reads the same environment knobs as start.sh
(passed down by it). Subcommands:

  keystone        service project, users nova/placement/glance, services and
                  public endpoints; an application credential for admin
                  (written once to $NOVA_RUN/appcred.json); project demo with
                  user demo, role member only (a credential without the admin
                  role, $NOVA_RUN/member.json); clouds.yaml
  wait-computes   wait until every compute-N service reports up, print timing
  flavor-image    flavor m1.tiny and image cirros-fake (a 1 KiB raw file)
"""
import json
import os
import sys
import time

import openstack

RUN = os.environ["NOVA_RUN"]
KS = "https://127.0.0.1:%s/v3" % os.environ["KEYSTONE_PORT"]
CA = os.environ["CA"]  # Keystone and nova-api serve HTTPS with this CA's certificate
ADMIN_PW = os.environ["NOVA_ADMIN_PASSWORD"]
SVC_PW = os.environ["NOVA_SERVICE_PASSWORD"]
REGION = "RegionOne"


def admin():
    return openstack.connect(
        auth_url=KS, username="admin", password=ADMIN_PW,
        project_name="admin", user_domain_name="Default",
        project_domain_name="Default", region_name=REGION,
        identity_interface="public", cacert=CA)


def keystone():
    c = admin()
    idn = c.identity
    dom = idn.find_domain("default") or idn.find_domain("Default")
    proj = idn.find_project("service", domain_id=dom.id) or idn.create_project(
        name="service", domain_id=dom.id, description="Service project")
    roles = {r.name: r for r in idn.roles()}
    for name in ("service",):
        if name not in roles:
            roles[name] = idn.create_role(name=name)
    for uname in ("nova", "placement", "glance"):
        u = idn.find_user(uname, domain_id=dom.id)
        if u is None:
            u = idn.create_user(name=uname, password=SVC_PW, domain_id=dom.id)
        for rname in ("admin", "service"):
            idn.assign_project_role_to_user(proj, u, roles[rname])
    ports = {"compute": ("nova", "https://127.0.0.1:%s/v2.1" % os.environ["NOVA_API_PORT"]),
             "placement": ("placement", "http://127.0.0.1:%s" % os.environ["PLACEMENT_PORT"]),
             "image": ("glance", "https://127.0.0.1:%s" % os.environ["GLANCE_PORT"]),
             "network": ("neutron", "http://127.0.0.1:%s" % os.environ["NEUTRON_PORT"])}
    services = {s.type: s for s in idn.services()}
    for stype, (sname, url) in ports.items():
        svc = services.get(stype) or idn.create_service(type=stype, name=sname)
        have = [e for e in idn.endpoints(service_id=svc.id, interface="public")]
        if not have:
            idn.create_endpoint(service_id=svc.id, interface="public", url=url,
                                region_id=REGION)
    # Application credential for the orchestrator (secret shown once: keep it).
    path = os.path.join(RUN, "appcred.json")
    if not os.path.exists(path):
        me = c.current_user_id
        ac = idn.create_application_credential(
            user=me, name="qfence-orchestrator",
            description="qfence Instance HA tests", roles=[{"name": "admin"}])
        with open(path, "w") as f:
            json.dump({"id": ac.id, "secret": ac.secret, "name": ac.name,
                       "user_id": me}, f)
    ac = json.load(open(path))
    # A project member without the admin role: Nova's default policy refuses it the
    # os-services API (403), which registration must grade as failed.
    demo = idn.find_project("demo", domain_id=dom.id) or idn.create_project(
        name="demo", domain_id=dom.id, description="A project without the admin role")
    u = idn.find_user("demo", domain_id=dom.id)
    if u is None:
        u = idn.create_user(name="demo", password=os.environ["NOVA_MEMBER_PASSWORD"],
                            domain_id=dom.id)
    idn.assign_project_role_to_user(demo, u, roles["member"])
    with open(os.path.join(RUN, "member.json"), "w") as f:
        json.dump({"project_id": demo.id, "user_id": u.id}, f)
    write_clouds(ac)


def write_clouds(ac):
    common = "      auth_url: %s\n" % KS
    text = (
        "clouds:\n"
        "  qfence-nova:\n"
        "    region_name: %(r)s\n"
        "    cacert: %(ca)s\n"
        "    identity_api_version: 3\n"
        "    auth:\n%(c)s"
        "      username: admin\n      password: %(pw)s\n"
        "      project_name: admin\n      user_domain_name: Default\n"
        "      project_domain_name: Default\n"
        "  qfence-nova-appcred:\n"
        "    region_name: %(r)s\n"
        "    cacert: %(ca)s\n"
        "    identity_api_version: 3\n"
        "    auth_type: v3applicationcredential\n"
        "    auth:\n%(c)s"
        "      application_credential_id: %(id)s\n"
        "      application_credential_secret: %(sec)s\n"
    ) % {"r": REGION, "c": common, "pw": ADMIN_PW, "id": ac["id"], "sec": ac["secret"], "ca": CA}
    with open(os.path.join(RUN, "clouds.yaml"), "w") as f:
        f.write(text)


def wait_computes(n, timeout):
    """Until every compute-N is up, or (forced down) has reported since now."""
    c = admin()
    want = {"compute-%d" % i for i in range(1, n + 1)}
    t0 = time.time()
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0))
    up = set()
    while time.time() - t0 < timeout:
        try:
            up = {s.host for s in c.compute.services(binary="nova-compute")
                  if s.state == "up" or (s.is_forced_down and
                                         (s.updated_at or "")[:19] > since)}
        except Exception as e:  # API not ready yet
            print("waiting for the compute API: %s" % e, file=sys.stderr)
        if want <= up:
            print("all %d compute services up after %.1f s" % (n, time.time() - t0),
                  file=sys.stderr)
            return 0
        time.sleep(1)
    print("compute services up: %s; wanted %s" % (sorted(up), sorted(want)),
          file=sys.stderr)
    return 1


def wait_hypervisors(n, timeout):
    c = admin()
    t0 = time.time()
    names = []
    while time.time() - t0 < timeout:
        names = [h.name for h in c.compute.hypervisors()]
        rps = list(c.placement.resource_providers())
        if len(names) >= n and len(rps) >= n:
            return 0
        time.sleep(1)
    print("hypervisors: %s" % names, file=sys.stderr)
    return 1


def flavor_image():
    """Flavor m1.tiny and image cirros-fake, both tagged evacuable=true (what Instance HA
    reads), and aggregate ha-hosts (every compute host, metadata evacuable=true)."""
    c = admin()
    flavor = c.compute.find_flavor("m1.tiny")
    if flavor is None:
        flavor = c.compute.create_flavor(name="m1.tiny", ram=128, vcpus=1, disk=1,
                                         id="1", is_public=True)
        c.compute.create_flavor_extra_specs(flavor, {"evacuable": "true"})
    img = c.image.find_image("cirros-fake")
    if img is None:
        img = c.image.create_image(
            name="cirros-fake", disk_format="raw", container_format="bare",
            visibility="public", data=b"\0" * 1024, wait=True, evacuable="true")
    agg = c.compute.find_aggregate("ha-hosts")
    if agg is None:
        agg = c.compute.create_aggregate(name="ha-hosts")
        c.compute.set_aggregate_metadata(agg, evacuable="true")
    have = set(c.compute.get_aggregate(agg).hosts or [])
    for i in range(1, int(os.environ.get("NOVA_COMPUTES", "3")) + 1):
        if "compute-%d" % i not in have:
            c.compute.add_host_to_aggregate(agg, "compute-%d" % i)
    print(img.id)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "keystone":
        keystone()
    elif cmd == "wait-computes":
        sys.exit(wait_computes(int(sys.argv[2]), float(sys.argv[3])))
    elif cmd == "wait-hypervisors":
        sys.exit(wait_hypervisors(int(sys.argv[2]), float(sys.argv[3])))
    elif cmd == "flavor-image":
        flavor_image()
    else:
        sys.exit("unknown subcommand %s" % cmd)
