"""The changeflow page in a real browser: Debian's Chromium driven by Playwright.

A real Airflow (API server, scheduler, DAG processor) on a temporary home; the browser
logs in through Airflow's login page, opens changeflow from the main navigation, checks
what the page shows, clicks Disable and Enable and checks each took effect in Airflow
(the DAG's pause state) and in the schedule store. Screenshots go to
``work/browser/``. The test fails when the page shows an error banner.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from changeflow.airflow.render import write
from changeflow.airflow.testing import PASSWORD, ROOT, AirflowServer
from changeflow.config import load_config
from changeflow.schedules.window import schedule_store

pytestmark = [pytest.mark.airflow, pytest.mark.slow]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = ROOT / "work" / "browser"
DAG = "changeflow_b__propagation__p1"
PIPELINE = """
version: 1
sites:
  site1: {staging_root: s1/staging, target_root: s1/t, state_url: "sqlite:///s1/state.db", database: DBS1.EXAMPLE.COM}
  site2: {staging_root: s2/staging, target_root: s2/t, state_url: "sqlite:///s2/state.db", database: DBS2.EXAMPLE.COM}
queues:
  - {name: strmadmin.q, site: site1}
  - {name: strmadmin.q, site: site2}
propagations:
  - name: p1
    source_queue: strmadmin.q@site1
    destination_queue: strmadmin.q@site2
    schedule: {start: "2024-01-01T00:00:00Z", duration: 300, next_time: 3600, latency: 20}
applies:
  - {name: ap, queue: strmadmin.q@site2}
"""


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServer]:
    root = tmp_path_factory.mktemp("browser")
    (root / "dags").mkdir()
    (root / "p.yaml").write_text(PIPELINE)
    write(load_config(root / "p.yaml"), project_root=str(root), pipeline="b",
          out_dir=str(root / "dags"))
    server = AirflowServer(root / "airflow", root / "dags",
                           env={"CHANGEFLOW_PIPELINES": f"b={root / 'p.yaml'}"},
                           users={"admin": "admin", "viewer": "viewer"})
    server.start()
    try:
        server.wait_for_dag(DAG)
        server.run("changeflow", "schedules", "--config", str(root / "p.yaml"), "sync")
        server.config = root / "p.yaml"  # type: ignore[attr-defined]
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: run make setup (scripts/system-deps.sh)")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def no_error(frame: Any) -> None:
    banner = frame.locator("[data-testid=error]")
    assert banner.is_hidden(), f"the page shows an error: {banner.inner_text()}"


def wait_for(cond: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def open_from_nav(page: Any, nav: Any, attempts: int = 3) -> None:
    """Click the main navigation's changeflow link until the page is the plugin's.

    Airflow's single-page app can re-render its navigation just after login (CI saw a
    click land on a link that was replaced and no navigation followed), so a click that
    leads nowhere within 20 s is repeated; the third miss fails the test.
    """
    from playwright.sync_api import TimeoutError as NavigationTimeout

    for attempt in range(1, attempts + 1):
        nav.click()
        try:
            page.wait_for_url("**/plugin/changeflow", timeout=20_000)
            return
        except NavigationTimeout:
            if attempt == attempts:
                shot(page, "01-navigation-failed")
                raise


def test_page_shows_schedules_and_its_actions_take_effect(airflow: AirflowServer,
                                                          browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{airflow.url}/")
    page.locator("input[name=username], input#username").first.fill("admin")
    page.locator("input[type=password]").first.fill(PASSWORD)
    page.locator("button[type=submit]").first.click()
    nav = page.get_by_role("link", name="changeflow").first
    nav.wait_for(timeout=60_000)
    page.wait_for_load_state("networkidle")
    shot(page, "01-airflow-home")
    assert (nav.get_attribute("href") or "").endswith("/plugin/changeflow")
    open_from_nav(page, nav)
    frame = page.frame_locator("iframe").first
    card = frame.locator("[data-testid=schedule-p1]")
    card.wait_for(timeout=60_000)
    shot(page, "02-changeflow-page")
    no_error(frame)
    assert frame.locator("[data-testid=pipeline]").input_value() == "b"
    # the schedule exists (sync) and is enabled, but its DAG is paused at creation
    assert card.locator("[data-testid=state]").inner_text() == "paused"
    assert card.locator("[data-testid=summary]").inner_text() == \
        "window 5 min every 1 h, latency 20 s"
    assert card.locator("[data-testid=total_number]").inner_text() == "0"
    assert card.locator("[data-testid=avg_time]").inner_text() == "0 s"
    assert card.locator("[data-testid=next_run]").inner_text().startswith("in ")
    assert "paused" in card.locator("[data-testid=dag]").inner_text()

    store = schedule_store(load_config(airflow.config), "p1")  # type: ignore[attr-defined]
    paused = lambda: airflow.api("GET", f"/api/v2/dags/{DAG}")["is_paused"]  # noqa: E731
    card.locator("[data-action=enable]").click()
    wait_for(lambda: not paused(), "enable did not unpause the DAG")
    card.locator("[data-testid=state]").filter(has_text="enabled").wait_for()
    no_error(frame)

    card.locator("[data-action=disable]").click()
    wait_for(lambda: store.require("p1").disabled, "disable had no effect on the schedule")
    wait_for(paused, "disable did not pause the DAG")
    frame.locator("[data-testid=flash]").wait_for(state="visible")
    assert "paused" in frame.locator("[data-testid=flash]").inner_text()
    card.locator("[data-testid=state]").filter(has_text="disabled").wait_for()
    no_error(frame)
    shot(page, "03-disabled")

    card.locator("[data-action=enable]").click()
    wait_for(lambda: not store.require("p1").disabled, "enable had no effect on the schedule")
    wait_for(lambda: not paused(), "enable did not unpause the DAG")
    card.locator("[data-testid=state]").filter(has_text="enabled").wait_for()
    no_error(frame)

    card.locator("[data-action=alter]").click()
    form = card.locator("[data-testid=alter-form]")
    form.locator("input[name=latency]").fill("7")
    form.locator("[data-action=save-alter]").click()
    wait_for(lambda: store.require("p1").schedule.latency == 7, "alter had no effect")
    card.locator("[data-testid=summary]").filter(has_text="latency 7 s").wait_for()
    no_error(frame)
    shot(page, "04-enabled-altered")
    page.close()


def test_every_action_goes_through_the_auth_manager(airflow: AirflowServer) -> None:
    airflow.api("POST", "/changeflow/api/schedules/p1/disable", {}, token="", expect=401)
    airflow.api("GET", "/changeflow/api/views/schedules", token="", expect=401)
    viewer = airflow.login("viewer")
    rows = airflow.api("GET", "/changeflow/api/views/schedules?pipeline=b", token=viewer)["rows"]
    assert [r["propagation"] for r in rows] == ["p1"]
    for action in ("disable", "enable", "alter", "trigger", "backfill"):
        airflow.api("POST", f"/changeflow/api/schedules/p1/{action}", {}, token=viewer,
                    expect=403)
    store = schedule_store(load_config(airflow.config), "p1")  # type: ignore[attr-defined]
    assert not store.require("p1").disabled  # nothing changed


def test_row_actions_delete_apply_errors_and_refuse_what_is_missing(
        airflow: AirflowServer) -> None:
    from changeflow.apply import errorq
    from changeflow.sites import queue_site

    cfg = load_config(airflow.config)  # type: ignore[attr-defined]
    rt, _ = queue_site(cfg, cfg.component("apply", "ap").queue)
    with rt.store.begin() as conn:  # what an apply records when a transaction fails
        entry_id, _ = errorq.record(conn, "ap", errorq.FailedTxn(
            "DBS1.EXAMPLE.COM:tx9", "target", "check constraint violated",
            source_database="DBS1.EXAMPLE.COM", transaction_id="tx9", commit_scn=42), None, 3)
    sections = {s["id"]: s for s in airflow.api("GET", "/changeflow/api/sections")}
    assert [a["name"] for a in sections["view-apply-errors"]["actions"]] == ["execute", "delete"]
    rows = airflow.api("GET", "/changeflow/api/views/view-apply-errors?pipeline=b")["rows"]
    assert [(r["apply"], r["id"]) for r in rows] == [("ap", entry_id)]

    viewer = airflow.login("viewer")
    url = "/changeflow/api/views/view-apply-errors/{}?pipeline=b"
    airflow.api("POST", url.format("delete"), {"apply": "ap", "id": entry_id}, token=viewer,
                expect=403)
    missing = airflow.api("POST", url.format("execute"), {"apply": "ap", "id": entry_id + 99},
                          expect=400)
    assert f"no error {entry_id + 99}" in missing["detail"]
    bad = airflow.api("POST", url.format("delete"), {"apply": "ap", "id": "x"}, expect=400)
    assert "integer 'id'" in bad["detail"]
    assert [e.id for e in errorq.entries(rt.store, "ap")] == [entry_id]  # nothing changed

    done = airflow.api("POST", url.format("delete"), {"apply": "ap", "id": entry_id})
    assert "deleted" in done["message"]
    assert errorq.entries(rt.store, "ap") == []
    rel = airflow.api("POST", "/changeflow/api/views/view-exceptions/release?pipeline=b",
                      {"queue": "strmadmin.q@site2", "batch": 1}, expect=400)
    assert "strmadmin.q" in rel["detail"]  # not quarantined (or not created yet): refused
