#!/usr/bin/env bash
# Install the schemathesis venv the API fuzz test runs ($QFENCE_EMU_HOME/schemathesis-<hash>),
# pinned in requirements/schemathesis.txt. Idempotent; prints the venv's bin dir last.
# The test (crates/qfence-server/tests/api/fuzz.rs) finds it by the same hash.
source "$(dirname "$0")/_lib.sh"
if venv_ready schemathesis; then
    echo "install: venv schemathesis: present ($(venv_dir schemathesis))" >&2
else
    t=$(now_ms); venv_install schemathesis
    echo "install: venv schemathesis: installed in $(( ($(now_ms) - t) / 1000 )) s" >&2
fi
"$(venv_dir schemathesis)/bin/schemathesis" --version >/dev/null
echo "$(venv_dir schemathesis)/bin"
