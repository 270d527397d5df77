"""The HTML report (`kernelfleet report RUN --html`) on real run stores (``report_html_store``): legends name the
problems, each problem's drill-down has one attempts row per attempt with its status, agent, model and tunables,
the tuner's parameters are plotted against speedup, a plot without data says why in its place, the page holds no
URL to fetch, and hostile text from the store (problem keys, agent names, sources, notes, reasons, tunables)
cannot inject markup or script."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from core.report.html import render_html
from core.report.html_assets import SCRIPT
from core.report.metrics import (build_report, fleet_summary, parameter_points, problem_drills,
                                 speedup_distribution, subset_sols)
from core.store import RunReader
from report_html_store import CPU_PLAN, GPU_PLAN, HOSTILE, Plan, Trial, build_store

KEYS = [plan.key for plan in GPU_PLAN]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("html") / "gpu")


@pytest.fixture(scope="module")
def page(gpu_run) -> str:
    with RunReader(gpu_run) as reader:
        return render_html(reader)


def _figure(page: str, title: str) -> str:
    """The <figure> whose caption is ``title``."""
    caption = re.escape(html.escape(title))
    match = re.search(rf"<figure class=\"plot\"><figcaption>{caption}</figcaption>(.*?)</figure>", page, re.S)
    assert match, f"no figure {title!r}"
    return match.group(1)


def _legend(figure: str) -> list[str]:
    return re.findall(r"<li>(?:<button[^>]*>)?<svg class=\"swatch\".*?</svg><span>(.*?)</span>", figure)


def _drill(page: str, index: int) -> str:
    start = page.index(f"<details class=\"problem\" id=\"problem-{index + 1}\"")
    end = page.find("<details class=\"problem\"", start + 1)
    return page[start:end if end != -1 else len(page)]


def _rows(drill: str) -> dict[int, list[str]]:
    """Attempt id -> the text of each cell of its row in the attempts table."""
    rows = {}
    for aid, body in re.findall(r"<tr id=\"attempt-(\d+)\"[^>]*>(.*?)</tr>", drill, re.S):
        rows[int(aid)] = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]
    return rows


# ---------------------------------------------------------------- the figures' formulas


def test_drills_hold_every_attempt_with_its_agent_and_role(gpu_run):
    with RunReader(gpu_run) as reader:
        drills = problem_drills(reader)
    assert [d.summary.key for d in drills] == KEYS
    assert [len(d.attempts) for d in drills] == [len(plan.trials) for plan in GPU_PLAN]
    rmsnorm = drills[0]
    assert [(line.agent, line.model, line.status, line.role) for line in rmsnorm.attempts] == [
        ("seed", "", "PASSED", "seed"), ("tuner-1", "optuna-tpe", "PASSED", ""),
        ("tuner-1", "optuna-tpe", "INCORRECT", ""), ("tuner-1", "optuna-tpe", "PASSED", ""),
        ("tuner-1", "optuna-tpe", "PASSED", "best"), ("tuner-1", "optuna-tpe", "PASSED", "")]
    assert rmsnorm.parameters == ("ROWS", "FORM") and drills[2].parameters == ()
    assert rmsnorm.timed_workloads == (0, 1, 2)
    # The partial attempt (9x on workload 0 only) and the failed one have no speedup the run counts.
    points = [(p.value, p.speedup, p.status) for p in parameter_points(rmsnorm.attempts, "ROWS")]
    assert points == [(16, 1.4, "PASSED"), (256, None, "INCORRECT"), (1, None, "PASSED"), (64, 2.5, "PASSED"),
                      (1, 0.7, "PASSED")]


def test_speedup_distribution_bins_by_half_octave(gpu_run):
    with RunReader(gpu_run) as reader:
        bins = speedup_distribution(problem_drills(reader))
    # Counted speedups: rmsnorm 1.0 1.4 2.5 0.7; softmax 0.8 1.6 1.1; attention 1.2 3.0 (the partial 9x is not).
    assert bins[0].low == pytest.approx(2 ** -1) and bins[-1].high == pytest.approx(2 ** 2)
    assert [b.total for b in bins] == [1, 1, 4, 1, 1, 1]
    assert dict(bins[2].counts) == {"L1/rmsnorm": 2, "L1/softmax": 1, "L2/attention": 1}  # [1, 1.41)
    assert sum(b.total for b in bins) == 9


def test_subset_sol_is_the_fleet_summary_of_each_subset(gpu_run):
    with RunReader(gpu_run) as reader:
        problems = build_report(reader).problems
    subsets = subset_sols(problems)
    assert [(s.subset, s.problems, len(s.sols)) for s in subsets] == [("L1", 2, 2), ("L2", 2, 1)]
    for s in subsets:
        members = [p for p in problems if p.subset == s.subset]
        assert s.mean_sol == fleet_summary(members).mean_sol and s.median_sol == fleet_summary(members).median_sol
    assert subsets[0].mean_sol == pytest.approx((0.8 + 0.62) / 2)


# ---------------------------------------------------------------- the page


def test_plots_have_legends_naming_the_problems_and_titled_axes(page):
    speedup = _figure(page, "Best speedup over time")
    assert _legend(speedup) == ["fleet geomean", "L1/rmsnorm", "L1/softmax", "L2/attention"]
    assert "time since the run started" in speedup and "best speedup over T_b (log)" in speedup
    assert re.search(r">1×</text>", speedup) and re.search(r">\d+ min</text>", speedup)
    sol = _figure(page, "Best SOL score over time")
    assert _legend(sol) == ["fleet mean SOL", "L1/rmsnorm", "L1/softmax", "L2/attention"]
    assert "best SOL score (1 = speed of light)" in sol
    assert _legend(_figure(page, "Distribution of the attempts' speedups")) == ["L1/rmsnorm", "L1/softmax",
                                                                                 "L2/attention"]
    bars = _figure(page, "Best speedup per problem")
    assert "no result" in bars and all(key in bars for key in KEYS)
    subset = _figure(page, "Best SOL score per subset")
    assert ">L1 (2/2)<" in subset and ">L2 (1/2)<" in subset
    # Each problem's marks are toggled by its legend entry: the same series id on both.
    assert "data-series=\"p0\"" in speedup and "<g data-series=\"p0\">" in speedup
    assert page.count("<svg class=\"chart\"") == 6 + 2 + 1  # 6 plots and 3 parameter scatters


def test_problems_table_is_sortable_and_links_each_drill_down(page):
    table = page[page.index("<table class=\"sortable problems\">"):]
    table = table[:table.index("</table>")]
    assert table.count("data-sort=") == 8
    for i, key in enumerate(KEYS):
        link = re.search(rf"<a href=\"#problem-{i + 1}\">(.*?)</a>", table).group(1)
        assert link.replace("<wbr>", "") == key
        assert f"id=\"problem-{i + 1}\"" in page
    assert "data-v=\"2.5\"" in table and "data-v=\"-Infinity\"" in table  # rmsnorm's best; the broken one's
    assert "<div class=\"scroll\"><table class=\"sortable problems\">" in page  # scrolls in its box if it must


def test_each_drill_down_has_one_row_per_attempt(page, gpu_run):
    with RunReader(gpu_run) as reader:
        drills = problem_drills(reader)
    for i, drill in enumerate(drills):
        rows = _rows(_drill(page, i))
        assert list(rows) == [line.row.id for line in drill.attempts]
        for line in drill.attempts:
            cells = rows[line.row.id]
            assert cells[0].startswith(f"#{line.row.id}") and cells[1] == line.agent and cells[2] == line.model
            assert cells[3].startswith(line.status)
    rmsnorm = _rows(_drill(page, 0))
    best = drills[0].best.id
    # "#, agent, model, status, speedup, SOL, w0-w2 ms, ROWS, FORM, parent, note, diff"
    assert rmsnorm[best][:12] == [f"#{best} best", "tuner-1", "optuna-tpe", "PASSED", "2.50×", "0.80", "0.04",
                                  "0.08", "0.12", "64", "fused", f"#{drills[0].seed.id}"]
    assert rmsnorm[best - 1][3] == "PASSED (part)" and rmsnorm[best - 2][3] == "INCORRECT"
    assert "max abs error 3e-1" in rmsnorm[best - 2][-2]
    attention = _drill(page, 2)
    assert "gpt-x" in attention and "RUNTIME_ERROR" in attention and "illegal memory access" in attention


def test_drill_down_links_the_bests_diff_against_the_seed_and_its_sources(page):
    drill = _drill(page, 0)
    for anchor in ("problem-1-best-diff", "problem-1-best-sources", "problem-1-attempts"):
        assert f"href=\"#{anchor}\"" in drill and f"id=\"{anchor}\"" in drill
    diff = drill[drill.index("id=\"problem-1-best-diff\""):drill.index("id=\"problem-1-best-sources\"")]
    assert "<span class=\"del\">-ROWS = 1</span>" in diff
    assert "<span class=\"add\">+ROWS = 64  # attempt 5</span>" in diff
    assert "def kernel(x, weight, eps=1e-6):" in drill  # the best's source
    assert "id=\"diff-2\"" in drill and "href=\"#diff-2\"" in drill  # each attempt's diff to its parent
    assert "no best yet" in _drill(page, 3)


def test_parameter_view_lists_the_tuners_parameters(page):
    view = page[page.index("id=\"parameters\""):page.index("id=\"details\"")]
    assert re.findall(r"aria-label=\"([^\"]*): speedup against ([^\"]*)\"", view) == [
        ("L1/rmsnorm", "ROWS"), ("L1/rmsnorm", "FORM"), ("L1/softmax", "BLOCK")]
    assert "ROWS (tunable)" in view and "FORM (tunable)" in view and "BLOCK (tunable)" in view
    for value in (">1<", ">16<", ">64<", ">256<", ">expr<", ">fused<", ">128<", ">2048<"):
        assert value in view
    assert "attempt 5: ROWS=64 → 2.50× (the best)" in view
    assert "attempt 3: ROWS=256 → INCORRECT" in view and "failed or partial" in view
    assert "L2/attention" not in view  # no tunables


def test_a_cpu_run_says_why_its_sol_plots_are_empty(tmp_path):
    run = build_store(tmp_path / "cpu", CPU_PLAN, device="cpu")
    with RunReader(run) as reader:
        page = render_html(reader)
    why = "no SOL score: the cpu device has no speed of light (T_sol)"
    for title in ("Best SOL score over time", "Best SOL score across problems", "Best SOL score per subset"):
        figure = _figure(page, title)
        assert why in figure and "<svg class=\"chart\"" not in figure and "class=\"legend\"" not in figure
    assert "<svg class=\"chart\"" in _figure(page, "Best speedup over time")
    assert "<svg class=\"chart\"" in _figure(page, "Distribution of the attempts' speedups")


def test_a_run_without_tuners_or_passing_attempts_says_so(tmp_path):
    run = build_store(tmp_path / "none", (Plan("a/x", (Trial(None, "RUNTIME_ERROR", reason="boom"),)),))
    with RunReader(run) as reader:
        page = render_html(reader)
    assert "no passing attempt yet" in _figure(page, "Best speedup over time")
    assert "no passing attempt yet" in _figure(page, "Distribution of the attempts' speedups")
    assert "no attempt set a tunable parameter" in page
    assert "<svg class=\"chart\"" in _figure(page, "Best speedup per problem")  # "no result" on its row


def test_the_page_fetches_nothing(page):
    assert not re.search(r"https?://", page)
    assert not re.search(r"\b(?:src|href|xlink:href|action)\s*=\s*\"(?!#)", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert page.count("<script") == 1 and "<script>" in page


# ---------------------------------------------------------------- hostile text


class _Tags(HTMLParser):
    """Every element and attribute the browser would build, and the text of each script."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def test_hostile_store_text_cannot_inject_markup_or_script(tmp_path):
    hostile_key = f"x/{HOSTILE}"
    plans = (Plan(hostile_key, (Trial(None, speedup=1.0, sol=0.5),
                                Trial("tuner-1", speedup=2.0, sol=0.7, tunables={HOSTILE: HOSTILE, "ROWS": 4}),
                                Trial("tuner-1", "INCORRECT", tunables={HOSTILE: 3}, reason="bad"),
                                Trial("llm-1", speedup=1.5, sol=0.6))),
             Plan(f"{HOSTILE}/y", (Trial(None, speedup=0.5, sol=0.2),)))
    run = build_store(tmp_path / "hostile", plans, agent_names={"tuner-1": HOSTILE, "llm-1": HOSTILE + "2"},
                      source_suffix=f"\n# {HOSTILE}\n")
    with RunReader(run) as reader:
        page = render_html(reader)
    parser = _Tags()
    parser.feed(page)
    parser.close()
    allowed = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h4", "p", "nav", "a", "div", "table",
               "thead", "tbody", "tr", "th", "td", "button", "span", "wbr", "ul", "li", "figure", "figcaption",
               "details", "summary", "pre", "svg", "g", "line", "polyline", "circle", "rect", "path", "text",
               "script"}
    assert {tag for tag, _ in parser.tags} <= allowed
    assert not [(tag, name) for tag, attrs in parser.tags for name, _ in attrs if name.startswith("on")]
    assert not [value for _, attrs in parser.tags for name, value in attrs if name in ("src", "href")
                and not (value or "").startswith("#")]
    # One script, ours, word for word: nothing from the store got into or after it.
    assert parser.scripts == [SCRIPT]
    assert "<img" not in page and page.count("<script") == 1
    assert "alert(1)" in page  # the text is there, escaped
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    # The hostile key and agent show as text: in the legend, and in the attempts table's agent column.
    assert f"x/{html.escape(HOSTILE)}" in _legend(_figure(page, "Best speedup over time"))
    assert {cells[1] for cells in _rows(_drill(page, 0)).values()} == {"seed", html.escape(HOSTILE),
                                                                        html.escape(HOSTILE + "2")}
