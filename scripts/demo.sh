#!/usr/bin/env bash
# The main job on the embedded default: installs, then runs an end-to-end demo of the
# partitioned-namespace core on a local directory and prints what was published.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh test
exec .venv/bin/python -m airflow_provider_lance demo "${1:-.demo/events}"
