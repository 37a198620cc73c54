"""The ``lance`` connection form in a real browser against a real Airflow api-server.

Starts ``airflow api-server`` on loopback on the test metastore, drives Airflow's own UI in
headless Chromium (Debian's ``chromium``, through Playwright): adds a ``lance`` connection
through the form, checks its fields (the storage options and secrets are password inputs,
the hidden fields are absent), reads the saved connection back through the hook, and opens
the connection's edit form to check the saved secret is shown nowhere. Screenshots of both
forms are kept under ``tests/artifacts/`` (git-ignored).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_lance.hooks.connection import LanceConnectionConfig

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
#: Chromium as root on a machine without outside network: no sandbox, no background calls.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SECRET = "form-secret-5be1d07c"
STORAGE_OPTIONS = {"aws_secret_access_key": SECRET, "aws_region": "eu-west-1"}

pytestmark = pytest.mark.slow


def _require_browser() -> None:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):  # scripts/test.sh installs it: its absence is a failure
            pytest.fail(f"no Chromium at {CHROMIUM}; scripts/test.sh installs Debian's chromium")
        pytest.skip("needs Chromium (Debian package chromium); scripts/test.sh installs it")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def api_server(airflow_db: Path) -> Iterator[str]:
    """``airflow api-server`` on the test metastore (every user an admin: no login)."""
    _require_browser()
    from airflow.models.crypto import get_fernet
    from cryptography.fernet import Fernet

    # One Fernet key for the server that encrypts the saved extras and this process that
    # reads them back (the airflow.cfg the migration wrote came after this config loaded).
    key_var = "AIRFLOW__CORE__FERNET_KEY"
    before = os.environ.get(key_var)
    os.environ[key_var] = Fernet.generate_key().decode()
    get_fernet.cache_clear()
    port = _free_port()
    env = dict(os.environ, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True")
    log = (airflow_db / "api-server.log").open("w")
    airflow = str(Path(sys.executable).parent / "airflow")
    process = subprocess.Popen(
        [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/version", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    text = (airflow_db / "api-server.log").read_text()[-3000:]
                    pytest.fail(f"the api-server did not start:\n{text}")
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        if before is None:
            os.environ.pop(key_var, None)
        else:
            os.environ[key_var] = before
        get_fernet.cache_clear()


@pytest.fixture(scope="module")
def browser(api_server: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        page = chromium.new_page(viewport={"width": 1400, "height": 1600})
        page.set_default_timeout(30_000)
        yield page
        chromium.close()


def _saved_config(conn_id: str) -> LanceConnectionConfig:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        conn = session.query(Connection).filter(Connection.conn_id == conn_id).one()
        return LanceConnectionConfig.from_fields(
            host=conn.host, login=conn.login, password=conn.password, extras=conn.extra_dejson
        )


def _inputs(dialog: Any) -> dict[str, str | None]:
    """The form's named inputs and their HTML types."""
    out: dict[str, str | None] = {}
    for element in dialog.locator("input, textarea").all():
        name = element.get_attribute("name")
        if name:
            out[name] = element.get_attribute("type")
    return out


def test_the_lance_connection_form_masks_the_storage_options(api_server: str, browser: Any) -> None:
    page = browser
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{api_server}/connections", wait_until="networkidle")
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("combobox").fill("lance")
    page.get_by_role("option", name="Lance Partitioned Namespace").click()
    dialog.get_by_text("Secret access key / account key").wait_for()  # the relabelling
    dialog.get_by_text("Extra Fields", exact=True).click()  # the provider's own fields
    dialog.locator('[name="element_secret_storage_options"]').wait_for()

    inputs = _inputs(dialog)
    assert inputs["element_secret_storage_options"] == "password"
    assert inputs["element_session_token"] == "password"
    assert inputs["password"] == "password"
    assert inputs["element_root"] != "password"  # where data lives is not a secret
    assert {"element_endpoint", "element_region", "element_allow_http"} <= set(inputs)
    assert not {"host", "schema", "port"} & set(inputs)  # hidden by the provider

    dialog.locator('[name="connection_id"]').fill("lance_browser")
    dialog.locator('[name="element_root"]').fill("s3://bucket/warehouse")
    dialog.locator('[name="element_secret_storage_options"]').fill(json.dumps(STORAGE_OPTIONS))
    dialog.locator('[name="element_region"]').fill("us-east-1")
    page.screenshot(path=str(ARTIFACTS / "lance-connection-add.png"), full_page=True)
    assert SECRET not in dialog.inner_text()  # typed into a password input: never shown
    with page.expect_response(
        lambda r: r.url.endswith("/api/v2/connections") and r.request.method == "POST"
    ) as saved:
        dialog.get_by_role("button", name="Save").click()
    assert saved.value.status == 201, saved.value.text()
    dialog.wait_for(state="detached")

    # saved as typed: what the hook makes of the row in the metastore
    config = _saved_config("lance_browser")
    assert config.root == "s3://bucket/warehouse"
    assert config.storage_options["aws_secret_access_key"] == SECRET
    assert config.storage_options["aws_region"] == "eu-west-1"  # the JSON wins over the field

    # the edit form of the saved connection shows the secret nowhere
    page.goto(f"{api_server}/connections", wait_until="networkidle")
    row = page.get_by_role("row").filter(has_text="lance_browser")
    row.get_by_role("button", name="Edit Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Extra Fields", exact=True).click()
    field = dialog.locator('[name="element_secret_storage_options"]')
    field.wait_for()
    page.wait_for_timeout(600)  # let the accordion finish opening for the screenshot
    page.screenshot(path=str(ARTIFACTS / "lance-connection-edit.png"), full_page=True)
    assert field.get_attribute("type") == "password"
    assert field.input_value() == "***"  # the REST API redacted it before the form saw it
    assert dialog.locator('[name="element_root"]').input_value() == "s3://bucket/warehouse"
    assert SECRET not in page.content()
    for element in dialog.locator("input, textarea").all():
        assert SECRET not in (element.input_value() or "")
