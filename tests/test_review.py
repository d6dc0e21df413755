"""The review UI (lookup_knowledge/review, docs/review.md) in a real headless Chromium (Selenium)
against a real ``serve`` on loopback: the app ``lookup-knowledge serve`` runs (``serve_app``: the
API and the review pages at ``/``) under uvicorn, over the sample knowledge base with one
document only ``hr`` may see, three tokens made by ``new_token`` (an unrestricted admin, ``hr``,
``contractor``), the calls those tokens made through the JSON API, and three small eval runs of
the sample evaluation set (two made without principals, one as ``hr``).

Bad input is checked over plain HTTP: a clear message in the page, never a stack trace.
Screenshots of every page at a laptop's and a phone's width go to
``.pytest_cache/d/review-screenshots`` (artifacts of the run, not committed).
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import make_config, write_markdown

from lookup_knowledge import AgentLookup, KnowledgeTool, ingest, load_config, sample_knowledge_base
from lookup_knowledge.adapters.recorder import InvocationRecorder
from lookup_knowledge.agent.lookup import invocation_db_url
from lookup_knowledge.cli.render import has_graphviz
from lookup_knowledge.config import Config
from lookup_knowledge.review.evals import run_folders

pytest.importorskip("uvicorn", reason="the review extra is not installed")
pytest.importorskip("mcp", reason="the serve extra is not installed")
import httpx  # noqa: E402
from serve_fixtures import READY_WAIT_S, auth, live, wait_ready  # noqa: E402

from lookup_knowledge.serve.app import review_pages, serve_app  # noqa: E402
from lookup_knowledge.serve.tokens import new_token  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="no chromium and chromium-driver on this machine (apt-get install chromium chromium-driver)",
)
CHROME_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip

REFUND_QUESTION = "Who must approve a refund above 500 EUR?"
REFUND_KEY = "payments-refund-policy#chunk-2"
SALARY_QUESTION = "What are the salary bands for staff engineers?"  # names no marker
SECRET_DOC = "hr-salary-bands-zq7"
SECRET_MARKERS = (
    SECRET_DOC,
    "Salary Bands Zq7",
    "hrsecretmarker",
    "hr/salary-bands",
)  # only that doc holds these
ISSUED = {  # who -> (the token, its serve.tokens entry), as `lookup-knowledge token` makes them
    "admin": new_token("admin", unrestricted=True),
    "hr": new_token("hr", ["hr"]),
    "contractor": new_token("contractor", ["contractor"]),
}
TOKEN = {who: token for who, (token, _) in ISSUED.items()}
CALLS = {"hr": SALARY_QUESTION, "admin": SALARY_QUESTION, "contractor": REFUND_QUESTION}  # in this order


@dataclass
class Site:
    url: str
    config: Config
    records: dict[str, int]  # token -> the id of the call it made through the JSON API (CALLS)
    evals: Path
    agent: AgentLookup


def _eval_runs(tool: KnowledgeTool, config: Config, root: Path) -> None:
    """Three small runs of the sample evaluation set: the configuration in force and dense-only,
    both made without principals (as ``eval`` makes them), and one made as ``hr``."""
    from lookup_knowledge.eval.data import beir_to_parquet, load_eval_queries, relevance
    from lookup_knowledge.eval.evaluation import evaluate
    from lookup_knowledge.eval.report import write_eval_outputs

    queries_file = root / "queries.parquet"
    beir_to_parquet(Path(sample_knowledge_base()).with_name("sample-eval"), queries_file)
    queries = load_eval_queries(queries_file).head(12)
    judged = relevance(queries)
    write_eval_outputs(evaluate(tool, queries, judged), root / "hybrid", "Hybrid", config)
    store = str(config.store.path)
    for name, title, setting in (
        ("dense", "Dense", {"retrieval.mode": "dense"}),
        ("hr-only", "As hr", {"access.principals": ["hr"]}),
    ):
        variant = tool.variant(load_config(overrides={"store.path": store, **setting}))
        write_eval_outputs(evaluate(variant, queries, judged), root / name, title, config)


@pytest.fixture(scope="module")
def site(sample_store: Path, embedder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:  # noqa: ANN001
    """``serve``'s app, its tokens the three of :data:`ISSUED`, on a free loopback port for the
    module's store; the tokens' calls made through its JSON API."""
    extra = tmp_path_factory.mktemp("restricted-kb")
    write_markdown(
        extra, "hr/salary-bands.md",
        {"id": SECRET_DOC, "title": "Salary Bands Zq7", "domain": "hr", "access": ["hr"]},
        "# Salary Bands Zq7\n\nStaff engineers are paid within salary band zq7 E5; hrsecretmarker. "
        "The salary bands are reviewed every spring by the people team.\n",
    )  # fmt: skip
    config = make_config(sample_store, serve__tokens=[entry for _, entry in ISSUED.values()])
    ingest(extra, config, embedder=embedder)
    tool = KnowledgeTool(config, embedder=embedder)
    agent = AgentLookup(tool, InvocationRecorder(invocation_db_url(config)))
    evals = tmp_path_factory.mktemp("evals")
    _eval_runs(tool, config, evals)
    with live(serve_app(config, agent, eval_dirs=[evals])) as url:  # closes the agent when it stops
        wait_ready(url)
        answers = {
            who: httpx.post(
                f"{url}/v1/lookup", json={"query": question, "session": f"{who}-session"},
                headers=auth(TOKEN[who]), timeout=READY_WAIT_S,
            ).json()
            for who, question in CALLS.items()
        }  # fmt: skip
        for who in ("hr", "admin"):  # the restricted document is there to leak: both may see it
            assert any(
                block["evidenceKey"].startswith(f"{SECRET_DOC}#") for block in answers[who]["evidenceBlocks"]
            )
        ids = {who: answer["retrievalTrace"]["invocationRecord"]["id"] for who, answer in answers.items()}
        yield Site(url, config, ids, evals, agent)


def _get(site: Site, path: str, token: str | None = TOKEN["admin"]) -> tuple[int, str]:
    request = urllib.request.Request(site.url + path)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


# --- bad input: a message, never a traceback (plain HTTP) ------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/?q=", 400, "the query is empty"),
        ("/?q=" + "a" * 3000, 400, "the query has 3000 characters"),
        ("/?q=refund%00policy", 400, "control characters"),
        ("/?q=%E2%80%8B", 400, "only invisible"),
        ("/path?q=", 400, "the query is empty"),
        ("/records?since=yesterday", 400, "since: &#39;yesterday&#39; is not a date and time"),
        ("/records?until=2026-13-45", 400, "until:"),
        ("/records?status=maybe", 400, "status: &#39;maybe&#39; is none of"),
        ("/records?before=ten", 400, "before: &#39;ten&#39; is not a whole number"),
        ("/records/987654", 404, "no recorded call 987654 that you may see"),
        ("/records/abc", 404, "no such page"),
        ("/evals/compare", 400, "pick two runs"),
        ("/evals/compare?a=dense&b=dense", 400, "two different runs"),
        ("/evals/compare?a=dense&b=hybrid&metric=vibes", 400, "metric: &#39;vibes&#39;"),
        ("/evals/compare?a=dense&b=nothing", 404, "no eval run &#39;nothing&#39;"),
        ("/evals/dense/..%2F..%2Fqueries.parquet", 404, ""),
        ("/evals/dense/metrics.json", 404, "has no plot"),
    ],
)
def test_bad_input_gets_a_clear_message_in_the_page(site: Site, path: str, status: int, message: str) -> None:
    code, body = _get(site, path)
    assert code == status
    assert message in body
    assert "Traceback" not in body and 'File "' not in body


def test_a_request_without_a_known_token_gets_the_sign_in_page(site: Site) -> None:
    for token in (None, "tok-unknown"):
        code, body = _get(site, "/records", token)
        assert code == 401 and 'name="token"' in body
        assert "Recorded calls" not in body
    code, body = _get(site, "/login", None)
    assert code == 401 and 'name="token"' in body and "not accepted" not in body
    code, body = _get(site, "/login")  # signed in already: on to Ask, not told its token was refused
    assert code == 200 and 'id="q"' in body and "not accepted" not in body


def test_a_sign_in_posted_from_another_site_is_refused(site: Site) -> None:
    """A login CSRF: another page posting its own token into the reviewer's browser."""
    body = urllib.parse.urlencode({"token": TOKEN["admin"]}).encode()
    for origin, status in (("http://evil.example", 403), (site.url, 303)):
        request = urllib.request.Request(site.url + "/login", data=body, headers={"Origin": origin})
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            response = opener.open(request, timeout=60)
            code, cookie = response.status, response.headers.get("set-cookie")
        except urllib.error.HTTPError as exc:
            code, cookie = exc.code, exc.headers.get("set-cookie")
        assert code == status
        assert (cookie is not None) == (status == 303)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: object) -> None:
        return None


def test_records_filter_by_session_status_and_time(site: Site) -> None:
    _, everything = _get(site, "/records")
    ids = [site.records[who] for who in ("hr", "admin", "contractor")]
    positions = [everything.index(f">{row_id}</a>") for row_id in ids]
    assert positions == sorted(positions, reverse=True)  # newest first
    _, one_session = _get(site, "/records?session=" + urllib.parse.quote("hr/hr-session"))
    assert f">{site.records['hr']}</a>" in one_session and f">{site.records['admin']}</a>" not in one_session
    _, future = _get(site, "/records?since=2999-01-01T00:00")
    assert "No recorded call you may see matches" in future
    _, past = _get(site, "/records?until=2999-01-01T00:00&status=evidence")
    assert f">{site.records['contractor']}</a>" in past


def _listed(page: str, row_id: int) -> bool:
    return f">{row_id}</a>" in page


def test_an_unrestricted_token_sees_the_calls_and_runs_made_without_principals(site: Site) -> None:
    """The admin token (``unrestricted: true``) sees every call and eval run, those made without
    principals included; a token with principals sees only calls and runs restricted to them:
    never one made without principals (it could hold any document)."""
    admin_call = site.records["admin"]
    _, listed = _get(site, "/records")
    assert all(_listed(listed, row_id) for row_id in site.records.values())
    code, page = _get(site, f"/records/{admin_call}")
    assert code == 200 and SECRET_DOC in page  # its own call, made without principals
    _, runs = _get(site, "/evals")
    assert all(f">{name}</a>" in runs for name in ("hybrid", "dense", "hr-only"))
    assert 'id="restricted-runs"' not in runs
    assert _get(site, "/evals/compare?a=hybrid&b=dense")[0] == 200
    plot = run_folders([site.evals])["dense"].plots()[0]
    assert _get(site, f"/evals/dense/{plot}")[0] == 200

    for who in ("hr", "contractor"):
        _, listed = _get(site, "/records", TOKEN[who])
        assert _listed(listed, site.records[who])  # the control: its own call is there
        assert not _listed(listed, admin_call)
        assert _get(site, f"/records/{admin_call}", TOKEN[who])[0] == 404
        assert _get(site, f"/records/{admin_call}/rerun", TOKEN[who])[0] == 404
        code, runs = _get(site, "/evals", TOKEN[who])
        assert code == 200 and 'id="restricted-runs"' in runs  # the page says why runs are missing
        assert ">hybrid</a>" not in runs and ">dense</a>" not in runs
        assert (">hr-only</a>" in runs) == (who == "hr")  # a run made as hr: for hr only
        for path in ("/evals/hybrid/", f"/evals/dense/{plot}", "/evals/compare?a=hybrid&b=dense"):
            assert _get(site, path, TOKEN[who])[0] == 404
    assert _get(site, "/evals/hr-only/", TOKEN["hr"])[0] == 200
    assert _get(site, "/evals/hr-only/", TOKEN["contractor"])[0] == 404


def test_without_tokens_the_one_local_reviewer_is_unrestricted(site: Site) -> None:
    """``serve`` with no tokens (loopback only): no sign-in, and the one reviewer is
    ``access.principals``, unrestricted by default (as ``lookup-knowledge review``)."""
    no_tokens = make_config(site.config.store.path)
    assert no_tokens.serve.tokens == [] and no_tokens.access.principals is None
    with live(review_pages(site.agent, no_tokens, [site.evals])) as url:
        local = dataclasses.replace(site, url=url)
        _, listed = _get(local, "/records", token=None)
        assert all(_listed(listed, row_id) for row_id in site.records.values())
        _, runs = _get(local, "/evals", token=None)
        assert all(f">{name}</a>" in runs for name in ("hybrid", "dense", "hr-only"))
        code, asked = _get(local, "/?q=" + urllib.parse.quote(SALARY_QUESTION), token=None)
        assert code == 200 and SECRET_DOC in asked


@pytest.mark.parametrize("token", ["", "   ", "x" * 5000])
def test_a_sign_in_without_a_usable_token_is_asked_again(site: Site, token: str) -> None:
    body = urllib.parse.urlencode({"token": token}).encode()
    request = urllib.request.Request(site.url + "/login", data=body, headers={"Origin": site.url})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    page = refused.value.read().decode("utf-8")
    assert refused.value.code == 401 and "paste the token you were given" in page
    assert refused.value.headers.get("set-cookie") is None and "Traceback" not in page


# --- in the browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[object]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(
            "no chromium and chromium-driver on this machine (apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="review-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_window_size(1280, 900)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def screenshots(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: pytest's cache (``.pytest_cache/d/review-screenshots``), kept
    after the run and never committed; a temporary folder when the cache plugin is off."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("review-screenshots") if cache else tmp_path_factory.mktemp("review-screenshots")


def _sign_in(browser, site: Site, token: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    browser.delete_all_cookies()
    _open(browser, site.url + "/")
    field = browser.find_element(By.ID, "token")
    field.send_keys(token)
    field.submit()
    WebDriverWait(browser, 60).until(
        expected_conditions.presence_of_element_located((By.ID, "q"))
    )  # signed in


def _open(browser, url: str) -> str:  # noqa: ANN001
    """Go to ``url`` and wait until its page is there (its ``main``); the page's source."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    browser.get(url)
    WebDriverWait(browser, 60).until(expected_conditions.presence_of_element_located((By.ID, "main")))
    return browser.page_source


def _wait(browser, element_id: str) -> None:  # noqa: ANN001
    """Wait until the page that a click or a key led to shows ``element_id``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(browser, 60).until(expected_conditions.presence_of_element_located((By.ID, element_id)))


def _text(browser, element_id: str) -> str:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, element_id).text


@needs_browser
def test_sign_in_keeps_the_token_in_an_http_only_same_site_strict_cookie(
    browser,  # noqa: ANN001
    site: Site,
    screenshots: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    browser.delete_all_cookies()
    _open(browser, site.url + "/")
    browser.find_element(By.ID, "token").send_keys("tok-wrong")
    browser.find_element(By.ID, "token").submit()
    WebDriverWait(browser, 60).until(expected_conditions.presence_of_element_located((By.ID, "message")))
    assert "that token was not accepted" in _text(browser, "message")
    browser.save_screenshot(str(screenshots / "login-1280.png"))
    _sign_in(browser, site, TOKEN["admin"])
    cookie = browser.get_cookies()[0]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert browser.execute_script("return document.cookie") == ""  # no script can read it


@needs_browser
def test_ask_by_keyboard_shows_the_verdict_and_the_blocks(browser, site: Site, screenshots: Path) -> None:  # noqa: ANN001
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _sign_in(browser, site, TOKEN["admin"])
    _open(browser, site.url + "/")
    for _ in range(10):  # skip link, the page links, sign out: then the question box
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.switch_to.active_element.get_attribute("id") == "q":
            break
    assert browser.switch_to.active_element.get_attribute("id") == "q"
    ActionChains(browser).send_keys(REFUND_QUESTION, Keys.ENTER).perform()
    _wait(browser, "status")  # the next page is there
    assert _text(browser, "status") == "evidence"
    assert _text(browser, "status-words").startswith("Found")
    assert _text(browser, "verdict-reason")  # the reason the verdict node gave, in words
    assert _text(browser, "level") in {"high", "medium", "low"}
    first = browser.find_element(By.ID, "block-1")
    assert first.find_element(By.CLASS_NAME, "key").text == REFUND_KEY
    assert "Refund Policy" in first.text and "payments/refund-policy.md" in first.text
    assert "vector:dense rank" in first.text and "domain_match:payments" in first.text  # reasons, boosts
    browser.save_screenshot(str(screenshots / "ask-1280.png"))
    browser.find_element(By.PARTIAL_LINK_TEXT, "The path of this lookup").click()
    _wait(browser, "nodes")  # the next page is there
    rows = browser.find_elements(By.CSS_SELECTOR, "#nodes tbody tr")
    assert len(rows) > 10 and any("fallback_decision" in row.text for row in rows)
    if has_graphviz():
        svg = browser.find_element(By.CSS_SELECTOR, "#dag svg")
        assert "unfiltered_hits" in svg.get_attribute("innerHTML") and " ms" in svg.text
    browser.save_screenshot(str(screenshots / "path-1280.png"))


@needs_browser
def test_a_record_opens_from_its_stored_trace_and_reruns(browser, site: Site, screenshots: Path) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    _sign_in(browser, site, TOKEN["admin"])
    _open(browser, site.url + "/records")
    browser.save_screenshot(str(screenshots / "records-1280.png"))
    browser.find_element(By.LINK_TEXT, str(site.records["contractor"])).click()
    _wait(browser, "record-input")  # the next page is there
    assert _text(browser, "record-input") == REFUND_QUESTION
    assert browser.find_element(By.CSS_SELECTOR, "#block-1 .key").text == REFUND_KEY
    assert "not recorded" in browser.find_element(By.ID, "block-1").text  # no breadcrumb kept: said so
    browser.save_screenshot(str(screenshots / "record-1280.png"))
    browser.find_element(By.LINK_TEXT, "The path of this call").click()  # from the recorded node times
    _wait(browser, "nodes")  # the next page is there
    assert "Recorded call" in browser.find_element(By.TAG_NAME, "main").text
    assert any("fallback_decision" in row.text for row in browser.find_elements(By.CSS_SELECTOR, "#nodes tr"))
    browser.back()
    _wait(browser, "rerun")  # the next page is there
    browser.find_element(By.ID, "rerun").click()
    _wait(browser, "key-changes")  # the next page is there
    changes = browser.find_element(By.ID, "key-changes").text
    assert REFUND_KEY in changes and "same rank" in changes  # the store did not change since
    browser.save_screenshot(str(screenshots / "rerun-1280.png"))


@needs_browser
def test_two_eval_runs_side_by_side(browser, site: Site, screenshots: Path) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    from lookup_knowledge.eval.compare import comparison_table
    from lookup_knowledge.review.evals import load_run, run_folders

    _sign_in(browser, site, TOKEN["admin"])
    _open(browser, site.url + "/evals")
    runs = browser.find_element(By.ID, "runs").text
    assert "dense" in runs and "hybrid" in runs
    browser.save_screenshot(str(screenshots / "evals-1280.png"))
    browser.find_element(By.CSS_SELECTOR, "input[name=a][value=hybrid]").click()
    browser.find_element(By.CSS_SELECTOR, "input[name=b][value=dense]").click()
    browser.find_element(By.ID, "compare").click()
    _wait(browser, "metrics")  # the next page is there
    row = browser.find_element(By.XPATH, "//table[@id='metrics']//tr[th='ndcg@10']")
    shown_delta = float(row.find_elements(By.TAG_NAME, "td")[2].text)
    folders = run_folders([site.evals])
    expected = comparison_table(
        {"baseline": load_run(folders["hybrid"]), "dense": load_run(folders["dense"])}
    )
    delta = expected[(expected["variant"] == "dense") & (expected["metric"] == "ndcg@10")]["delta"].item()
    assert shown_delta == pytest.approx(delta, abs=5e-5)
    browser.save_screenshot(str(screenshots / "compare-1280.png"))
    a, b = (
        load_run(folders[name]).per_query.set_index("query_id")["ndcg@10"] for name in ("hybrid", "dense")
    )
    largest = (b - a).abs().max()
    assert largest > 0  # the two configurations differ on some query: the table has rows to show
    moved = browser.find_elements(By.CSS_SELECTOR, "#moved tbody tr")
    top_delta = float(moved[0].find_elements(By.TAG_NAME, "td")[4].text.split()[0])
    assert abs(top_delta) == pytest.approx(largest, abs=5e-5)  # the query that moved most comes first
    question = moved[0].find_element(By.TAG_NAME, "a").text
    moved[0].find_element(By.TAG_NAME, "a").click()  # it opens in the inspector (Ask)
    _wait(browser, "status")  # the next page is there
    assert browser.find_element(By.ID, "q").get_attribute("value") == question
    assert _text(browser, "status")
    _open(browser, site.url + "/evals/dense/")
    assert _text(browser, "run-name") == "dense"
    browser.save_screenshot(str(screenshots / "run-1280.png"))
    plots = browser.find_elements(By.CSS_SELECTOR, "#report img")
    assert len(plots) == 4 and all(
        browser.execute_script("return arguments[0].naturalWidth", p) for p in plots
    )


@needs_browser
def test_phone_width_scrolls_no_page_sideways(browser, site: Site, screenshots: Path) -> None:  # noqa: ANN001
    _sign_in(browser, site, TOKEN["admin"])
    pages = {
        "ask": "/?q=" + urllib.parse.quote(REFUND_QUESTION), "path": "/path?q=kafka+consumer+lag",
        "records": "/records", "record": f"/records/{site.records['admin']}", "evals": "/evals",
        "run": "/evals/hybrid/", "compare": "/evals/compare?a=hybrid&b=dense", "message": "/records?since=x",
        "rerun": f"/records/{site.records['contractor']}/rerun",
    }  # fmt: skip
    browser.set_window_size(390, 844)
    try:
        for name, path in pages.items():
            _open(browser, site.url + path)
            wide = browser.execute_script(
                "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert wide[0] <= wide[1], f"{name} scrolls sideways at 390 px: {wide}"
            browser.save_screenshot(str(screenshots / f"{name}-390.png"))
        browser.delete_all_cookies()
        _open(browser, site.url + "/login")
        assert browser.execute_script(
            "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
        browser.save_screenshot(str(screenshots / "login-390.png"))
    finally:
        browser.set_window_size(1280, 900)


@needs_browser
def test_a_reviewer_never_sees_a_document_its_principals_may_not(
    browser,  # noqa: ANN001
    site: Site,
    screenshots: Path,
) -> None:
    salary = "/?q=" + urllib.parse.quote(SALARY_QUESTION)
    _sign_in(browser, site, TOKEN["hr"])  # the control: one allowed sees it, so the check can fail
    _open(browser, site.url + salary)
    assert SECRET_DOC in browser.page_source

    _sign_in(browser, site, TOKEN["contractor"])
    visited = [
        salary, salary + "&principals=hr&principal=hr", "/path?q=" + urllib.parse.quote(SALARY_QUESTION),
        "/records", "/records?session=hr%2Fhr-session", f"/records/{site.records['hr']}",
        f"/records/{site.records['admin']}", f"/records/{site.records['hr']}/rerun",
        f"/records/{site.records['hr']}/path", f"/records/{site.records['contractor']}", "/evals",
        "/evals/hybrid/", "/evals/hr-only/", "/evals/compare?a=hybrid&b=dense",
    ]  # fmt: skip
    leaks = []
    shots = {"/evals": "evals-restricted-1280.png", f"/records/{site.records['admin']}": "message-1280.png"}
    for path in visited:
        _open(browser, site.url + path)
        leaks += [
            (path, marker) for marker in SECRET_MARKERS if marker.lower() in browser.page_source.lower()
        ]
        if path in shots:
            browser.save_screenshot(str(screenshots / shots[path]))
    assert leaks == []
    listed = _open(browser, site.url + "/records")  # its own call is there; the others' are not
    assert f">{site.records['contractor']}</a>" in listed
    assert f">{site.records['hr']}</a>" not in listed and f">{site.records['admin']}</a>" not in listed


@pytest.mark.slow
def test_the_review_command_serves_the_pages_on_loopback_as_one_reviewer(site: Site) -> None:
    """``lookup-knowledge review``: no sign-in on loopback; every page is seen as --principal."""
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cli = Path(sys.executable).with_name("lookup-knowledge")
    store = f"store.path={site.config.store.path}"
    args = [str(cli), "review", "--set", store, "--principal", "contractor", "--port", str(port)]
    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    local = dataclasses.replace(site, url=f"http://127.0.0.1:{port}")
    try:
        for _ in range(600):  # the model loads first
            try:
                code, body = _get(local, "/?q=" + urllib.parse.quote(SALARY_QUESTION), token=None)
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                time.sleep(0.5)
        assert code == 200 and 'id="status"' in body
        assert SECRET_DOC not in body  # seen as the contractor: not the hr document
        code, records = _get(local, "/records", token=None)
        assert code == 200 and f">{site.records['contractor']}</a>" in records
        assert f">{site.records['hr']}</a>" not in records
    finally:
        server.terminate()
        server.wait(timeout=60)
