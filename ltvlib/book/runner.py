"""Execute the book's chapters and render HTML.

Usage::

    python -m ltvlib.book list
    python -m ltvlib.book tidy [--chapters 00 ...]
    python -m ltvlib.book build [--profile cpu] [--model smollm2-135m] [--seed 0]
        [--device auto] [--chapters 00 01 ...] [--no-html] [--force] [-p KEY VALUE ...]

Chapters are jupytext ``py:percent`` files ``chapters/NN_name.py``; the ``.py``
is the source of truth and the paired ``.ipynb`` is its executed output. The
chapter list and order come from ``_toc.yml`` so new chapters need no change
here, except that the pages in :data:`RUN_LAST` (the scorecard, which reads
what the others record under ``results/claims/``) execute after all others
wherever the toc lists them, and whenever any chapter executes.

With the default setting (profile ``cpu``, model ``smollm2-135m``, seed 0, no
``-p`` extras) the executed notebooks replace ``chapters/NN_name.ipynb``, which
are committed so the repository shows real results. Any other setting is
staged into ``_build/runs/<profile>__<model>/`` and built there, so e.g. a
smoke run can never overwrite the committed cpu outputs.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

# the book's layout lives in a leaf module that the scorecard imports too; its names are re-exported here
from ltvlib.book.layout import (  # noqa: F401
    BOOK_ROOT_ENV,
    CHAPTER_DIR,
    CLAIMS_DIR,
    DEFAULT_DEVICE,
    DEFAULT_MODEL,
    DEFAULT_PROFILE,
    DEFAULT_SEED,
    RUN_LAST,
    Chapter,
    claims_root,
    is_default,
    load_toc,
    read_chapters,
    sanitise,
    staging_dir,
    strip_ext,
    toc_pages,
    verdict_slug,
)
from ltvlib.cache import atomic_write_text, script_dependency_hash

KERNEL_NAME = "ltv-book"
PROFILES = ("smoke", "cpu", "paper")
STAMP_KEY = "ltvbook"
JUPYTEXT_FORMATS = "ipynb,py:percent"


class ChapterError(RuntimeError):
    """A chapter failed to execute; the message names the chapter and the error."""


# --------------------------------------------------------------------------- toc


def select_chapters(chapters: Sequence[Chapter], prefixes: Sequence[str] | None) -> list[Chapter]:
    """Chapters whose name starts with any prefix ("03", "03_icl"); all if none given."""
    if not prefixes:
        return list(chapters)
    unknown = [p for p in prefixes if not any(c.name.startswith(p) for c in chapters)]
    if unknown:
        names = ", ".join(c.name for c in chapters)
        raise SystemExit(f"no chapter matches {unknown}; chapters in _toc.yml: {names}")
    return [c for c in chapters if any(c.name.startswith(p) for p in prefixes)]


def runs_last(chapter: Chapter) -> bool:
    return chapter.name in RUN_LAST


def execution_order(chapters: Sequence[Chapter], selected: Sequence[Chapter]) -> list[Chapter]:
    """``selected`` in toc order, then every :data:`RUN_LAST` chapter of ``chapters`` (selected or not):
    they summarise the others' results, so they must run after them and whenever any of them ran."""
    first = [c for c in selected if not runs_last(c)]
    return first + [c for c in chapters if runs_last(c)]


def filter_toc(toc: dict[str, Any], drop: set[str]) -> dict[str, Any]:
    """Copy of ``toc`` without the entries whose docname is in ``drop``
    (parts left empty are removed: Sphinx rejects empty captions' lists)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            kept = [walk(n) for n in node if not (isinstance(n, dict) and strip_ext(str(n.get("file", ""))) in drop)]
            return [n for n in kept if n is not None]
        if isinstance(node, dict):
            node = dict(node)
            for key in ("parts", "chapters", "sections"):
                if key in node:
                    node[key] = walk(node[key])
                    if not node[key]:
                        del node[key]
                        if key == "chapters" and "file" not in node:
                            return None  # a part with nothing left
            return node
        return node

    return walk(copy.deepcopy(toc))


# ------------------------------------------------------------------- parameters


def parse_value(text: str) -> Any:
    """Type a ``-p`` value like papermill's CLI does: int, float, bool, None, else str."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    return text


# ------------------------------------------------------------------------ stamps


def make_stamp(chapter: Chapter, params: dict[str, Any], *, inputs: str | None = None) -> dict[str, Any]:
    """What an executed notebook was computed from; ``inputs`` is a digest of the files it reads (only
    :data:`RUN_LAST` chapters have one: :func:`claims_digest`)."""
    stamp = {
        "source_sha": hashlib.sha256(chapter.py.read_bytes()).hexdigest(),
        "params": dict(sorted(params.items())),
        # the library code the chapter imports (directly or not), not the whole package: editing a module no
        # chapter uses re-executes nothing
        "code_version": script_dependency_hash(chapter.py),
    }
    if inputs is not None:
        stamp["inputs_sha"] = inputs
    return stamp


def claims_digest(book_root: Path) -> str:
    """sha256 over the names and contents of ``<book_root>/results/claims/*.json``."""
    h = hashlib.sha256()
    for path in sorted((book_root / CLAIMS_DIR).glob("*.json")):
        h.update(path.name.encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def read_stamp(notebook: Path) -> dict[str, Any] | None:
    try:
        with open(notebook, encoding="utf-8") as fh:
            meta = json.load(fh).get("metadata", {})
    except (OSError, ValueError):
        return None
    stamp = meta.get(STAMP_KEY)
    return stamp if isinstance(stamp, dict) else None


def up_to_date(notebook: Path, stamp: dict[str, Any]) -> bool:
    # round-trip through JSON so tuples/ints compare as they were stored
    return read_stamp(notebook) == json.loads(json.dumps(stamp, default=str))


def outputs_current(root: Path, chapter: Chapter) -> bool:
    """Whether ``chapter``'s committed notebook was executed in the default setting from its current source and
    the current code of the library modules it imports (what :func:`build` would skip). Checks of what the
    executed outputs contain apply only to such notebooks: a stale one is re-executed by the next build."""
    notebook = root / f"{chapter.docname}.ipynb"
    stamp = read_stamp(notebook)
    if stamp is None or not is_default(stamp.get("params", {})):
        return False
    want = make_stamp(chapter, stamp["params"], inputs=claims_digest(root) if runs_last(chapter) else None)
    return up_to_date(notebook, want)


# ------------------------------------------------------------------------ kernel


def ensure_kernel(name: str = KERNEL_NAME) -> str:
    """Make sure kernelspec ``name`` runs *this* interpreter; return the name to use.

    scripts/book.sh registers it with ``ipykernel install --sys-prefix``; this
    repeats that when needed (fresh venv, tests) so the runner never executes
    chapters in some other Python that happens to be called ``python3``.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(name)
        if spec.argv and spec.argv[0] == sys.executable:
            return name
    except NoSuchKernel:
        pass
    from ipykernel.kernelspec import install

    try:
        install(kernel_name=name, display_name=f"Python ({name})", prefix=sys.prefix)
    except OSError as exc:  # read-only prefix: fall back on jupyter_client mapping "python" to sys.executable
        print(f"[ltv-book] cannot register kernel {name!r} in {sys.prefix} ({exc}); using python3", file=sys.stderr)
        return "python3"
    spec = KernelSpecManager().get_kernel_spec(name)
    if spec.argv[0] != sys.executable:
        raise RuntimeError(
            f"kernelspec {name!r} at {spec.resource_dir} runs {spec.argv[0]}, not {sys.executable}; "
            f"remove it (jupyter kernelspec remove {name})"
        )
    return name


# --------------------------------------------------------------------- execution


def load_source(chapter: Chapter) -> Any:
    """The chapter as a notebook, read from its ``.py`` with jupytext.

    Equivalent to ``jupytext --sync`` with the ``.py`` as the source: the
    ``.ipynb`` is rewritten from it, never the other way round (the executed
    ``.ipynb`` is always newer, so mtime-based sync would pick the wrong side).
    """
    import jupytext

    nb = jupytext.read(chapter.py, fmt="py:percent")
    nb.metadata.setdefault("jupytext", {})["formats"] = JUPYTEXT_FORMATS
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        raise ChapterError(f"{chapter.name}: no cell tagged 'parameters' in {chapter.py}")
    return nb


RUN_KEY = "ltvbook_run"
"""Notebook metadata of the run that produced it: ``{"seconds", "peak_rss_bytes"}`` (not part of the stamp)."""


class PeakMemory:
    """The peak resident memory of this process's children (a chapter's kernel and what it starts), summed over
    them, sampled while the ``with`` block runs: every 50 ms for the first 5 s, then every ``interval`` seconds.

    ``peak_bytes`` is 0 where ``psutil`` is missing or no child was ever seen. Sampling misses a spike shorter
    than ``interval``; a chapter's memory grows with what it keeps (models, prompt caches), so the peak of a
    run lasting minutes is what this measures.
    """

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        try:
            import psutil
        except ImportError:  # a measurement only: the build runs without it
            return
        me = psutil.Process()
        # Dense for the first seconds, then every ``interval``: a kernel that lives under a second is still seen.
        start = time.monotonic()
        while True:
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:  # a child that ended between listing and reading
                    pass
            self.peak_bytes = max(self.peak_bytes, total)
            wait = min(0.05, self.interval) if time.monotonic() - start < 5 else self.interval
            if self._stop.wait(wait):
                return

    def __enter__(self) -> PeakMemory:  # noqa: PYI034 (typing.Self needs Python 3.11; we support 3.10)
        self._thread = threading.Thread(target=self._sample, name="ltv-book-peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()


def execute_chapter(
    chapter: Chapter,
    params: dict[str, Any],
    target: Path,
    *,
    kernel_name: str | None = None,
    cwd: Path | None = None,
    work_dir: Path | None = None,
    book_root: Path | None = None,
    stamp: dict[str, Any] | None = None,
) -> float:
    """Execute ``chapter`` with papermill into ``target``.

    Args:
        chapter: the chapter; its ``.py`` is the source.
        params: injected after the ``parameters`` cell (model, profile, seed, device, extras).
        target: where the executed, stamped notebook goes (written atomically).
        kernel_name: kernelspec; default :func:`ensure_kernel`'s.
        cwd: kernel working dir; default the chapter's own dir (``chapters/``).
        work_dir: where papermill writes while running; default ``<root>/_build/executing``.
        book_root: the root results are recorded under, passed to the kernel as ``$LTV_BOOK_ROOT``;
            default :func:`claims_root` (the chapter's own root for the default setting, else its staging
            dir: a smoke run must never overwrite the repository's committed claims).
        stamp: stored in the notebook's metadata; default :func:`make_stamp` of ``chapter`` and ``params``.

    Returns:
        Execution time in seconds.

    Raises:
        ChapterError: on any failure; ``target`` is left untouched.

    Papermill writes into ``work_dir`` (saved after every cell, so progress is
    visible); only on success is the result stamped and atomically moved to
    ``target``. On failure the partial notebook stays in ``work_dir`` and
    ChapterError names the chapter, the error and that file.
    """
    import jupytext
    import nbformat
    import papermill as pm

    # kernels inherit this; it silences debugpy's "frozen modules" note on every start
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    kernel_name = kernel_name or ensure_kernel()
    cwd = cwd or chapter.py.parent
    work_dir = work_dir or chapter.root / "_build" / "executing"
    work_dir.mkdir(parents=True, exist_ok=True)
    scratch = work_dir / f"{chapter.name}.ipynb"
    nb = load_source(chapter)
    # a .py without a jupytext header has no kernelspec; papermill needs the language
    nb.metadata["kernelspec"] = {"name": kernel_name, "display_name": f"Python ({kernel_name})", "language": "python"}
    nb.metadata.setdefault("language_info", {"name": "python"})
    stamp = stamp or make_stamp(chapter, params)
    start = time.perf_counter()
    # the kernel inherits this process's environment when papermill starts it
    previous_root = os.environ.get(BOOK_ROOT_ENV)
    os.environ[BOOK_ROOT_ENV] = str((book_root or claims_root(chapter.root, params)).resolve())
    memory = PeakMemory()
    try:
        with memory:
            pm.execute_notebook(
                nb,
                str(scratch),
                parameters=params,
                kernel_name=kernel_name,
                cwd=str(cwd),
                log_output=True,
                progress_bar=False,
            )
    except pm.PapermillExecutionError as exc:
        raise ChapterError(
            f"chapter {chapter.name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}\n"
            f"partial notebook: {scratch}"
        ) from exc
    except Exception as exc:  # kernel death, timeouts, missing kernelspec, ...
        raise ChapterError(f"chapter {chapter.name} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if previous_root is None:
            os.environ.pop(BOOK_ROOT_ENV, None)
        else:
            os.environ[BOOK_ROOT_ENV] = previous_root
    elapsed = time.perf_counter() - start
    executed = nbformat.read(scratch, as_version=4)
    executed.metadata[STAMP_KEY] = json.loads(json.dumps(stamp, default=str))
    executed.metadata[RUN_KEY] = {"seconds": round(elapsed, 1), "peak_rss_bytes": int(memory.peak_bytes)}
    # papermill records a NotebookNode input as the whole notebook; keep paths only
    pm_meta = executed.metadata.get("papermill", {})
    pm_meta["input_path"] = chapter.py.name
    pm_meta["output_path"] = target.name
    executed.metadata.setdefault("jupytext", {})["formats"] = JUPYTEXT_FORMATS
    tidy_notebook(executed)
    atomic_write_text(target, jupytext.writes(executed, fmt="ipynb"))
    scratch.unlink(missing_ok=True)
    return elapsed


def run_record(ipynb: Path) -> dict[str, Any]:
    """The :data:`RUN_KEY` metadata of an executed notebook (its time and the kernel's peak resident memory);
    empty for a notebook without it (executed before it was recorded, or missing)."""
    try:
        meta = json.loads(ipynb.read_text()).get("metadata", {})
    except (OSError, ValueError):
        return {}
    rec = meta.get(RUN_KEY, {})
    return dict(rec) if isinstance(rec, dict) else {}


# -------------------------------------------------------------------------- tidy

# Tags that already decide how a cell's input shows; tidy_notebook adds "hide-input" to no cell that has one.
_INPUT_TAGS = frozenset({"hide-input", "remove-input", "hide-cell", "remove-cell"})
# A progress-bar update: tqdm redraws its line with a carriage return and prints "NN%|bar| n/N".
_PROGRESS_LINE = re.compile(r"\r(?!\n)|\d+%\|[^\n]*\|\s*\d+/\d+|^Loading weights")
# An absolute path into a Python environment's packages, up to and including "site-packages/".
_SITE_PACKAGES = re.compile(r"(?:[A-Za-z]:)?[^\s\"'<>=(]*[/\\](?:site|dist)-packages[/\\]")
# A path under the superuser's home, wherever the notebook was executed.
_ROOT_HOME = re.compile(r"(?<![\w.~/-])/root(?=/)")
NA_DASH = "\u2013"  # what a missing value (pandas' NaN) shows as in an HTML table of the book
_NAN_CELL = re.compile(r"<td>(?:NaN|&lt;NA&gt;)</td>")  # pandas' float NaN and its missing-value scalar
_NAN_TD = f'<td class="ltv-na" title="no value: not measured here, or the paper gives none">{NA_DASH}</td>'


def _scrub_paths(text: str, roots: Sequence[Path]) -> str:
    """``text`` with absolute paths made relative: into site-packages -> ``<site-packages>/``, the book root(s)
    -> ``.``, the home directory -> ``~``."""
    text = _SITE_PACKAGES.sub("<site-packages>/", text)
    for root in sorted({str(r) for r in roots if str(r) not in ("", "/")}, key=len, reverse=True):
        text = text.replace(root + "/", "./").replace(root, ".")
    home = str(Path.home())
    if home not in ("", "/"):
        text = text.replace(home + "/", "~/").replace(home, "~")
    return _ROOT_HOME.sub("~", text)


def _text_of(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def tidy_outputs(outputs: list[Any], roots: Sequence[Path]) -> list[Any]:
    """A cell's outputs as readers should see them: no stderr stream (warnings, progress bars), no progress-bar
    line on stdout, no absolute path, NaN cells of HTML tables as an en dash. Images are left as they are."""
    kept = []
    for out in outputs:
        if out.get("output_type") == "stream":
            if out.get("name") == "stderr":
                continue
            lines = _text_of(out.get("text", "")).splitlines(keepends=True)
            text = _scrub_paths("".join(line for line in lines if not _PROGRESS_LINE.search(line)), roots)
            if not text.strip():
                continue
            out["text"] = text
        for mime, value in list(out.get("data", {}).items()):
            if mime.startswith("text/"):
                text = _scrub_paths(_text_of(value), roots)
                if mime == "text/html":
                    text = _NAN_CELL.sub(_NAN_TD, text)
                out["data"][mime] = text
        if out.get("output_type") == "error":
            out["traceback"] = [_scrub_paths(line, roots) for line in out.get("traceback", [])]
        kept.append(out)
    return kept


def tidy_notebook(nb: Any, *, roots: Sequence[Path] = ()) -> Any:
    """Clean an executed notebook for the book, in place, and return it; idempotent.

    - outputs: :func:`tidy_outputs` (``roots``: directories to show as ``.``; the runner passes none: a
      chapter that prints where the book lives means it, and the tests check that no committed output does);
    - code cells: tagged ``hide-input`` (collapsed, one click away), except the run's parameters;
    - parameters shown once: when papermill injected an ``injected-parameters`` cell (the values the run used),
      the ``parameters`` cell (the defaults it overrides) is tagged ``remove-cell`` and the injected one is left
      visible.

    Notebook metadata, the stamp included, is not touched.
    """
    code = [c for c in nb.cells if c.get("cell_type") == "code"]
    injected = any("injected-parameters" in c.get("metadata", {}).get("tags", []) for c in code)
    for cell in code:
        tags = list(cell.setdefault("metadata", {}).get("tags", []))
        if "parameters" in tags and injected:
            tags.append("remove-cell")
        elif not ({"parameters", "injected-parameters"} & set(tags)) and not (_INPUT_TAGS & set(tags)):
            tags.append("hide-input")
        tags = [t for i, t in enumerate(tags) if t not in tags[:i]]
        if tags:
            cell["metadata"]["tags"] = tags
        cell["outputs"] = tidy_outputs(list(cell.get("outputs", [])), roots)
    return nb


def tidy_file(notebook: Path, *, roots: Sequence[Path] = ()) -> bool:
    """Apply :func:`tidy_notebook` to a committed notebook in place (atomically); True if it changed."""
    import jupytext

    before = notebook.read_text(encoding="utf-8")
    nb = tidy_notebook(jupytext.reads(before, fmt="ipynb"), roots=roots)
    after = jupytext.writes(nb, fmt="ipynb")
    if after == before:
        return False
    atomic_write_text(notebook, after)
    return True


# ----------------------------------------------------------------------- staging


def stage_tree(root: Path, stage: Path, chapters: Sequence[Chapter]) -> None:
    """Copy what Sphinx needs, except chapter notebooks, from ``root`` into ``stage``."""
    stage.mkdir(parents=True, exist_ok=True)
    for name in ("_config.yml", "_toc.yml", *(p.name for p in root.glob("*.bib"))):
        if (root / name).exists():
            shutil.copy2(root / name, stage / name)
    # the book's CSS (verdict badges, tables); jupyter-book adds _static/ to the HTML when it exists
    if (root / "_static").is_dir():
        shutil.copytree(root / "_static", stage / "_static", dirs_exist_ok=True)
    chapter_docs = {c.docname for c in chapters}
    for doc in toc_pages(root):
        if doc in chapter_docs:
            continue
        for ext in (".md", ".ipynb", ".rst"):
            src = root / f"{doc}{ext}"
            if src.exists():
                (stage / doc).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, stage / f"{doc}{ext}")
    # assets beside the chapters (figures, markdown includes), minus the notebooks themselves
    src_ch = root / CHAPTER_DIR
    if src_ch.is_dir():
        shutil.copytree(
            src_ch,
            stage / CHAPTER_DIR,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("*.py", "*.ipynb", "__pycache__", ".ipynb_checkpoints"),
        )


# -------------------------------------------------------------------------- html


def build_html(book_root: Path, *, strict: bool = True, output_dir: Path | None = None) -> Path:
    """``jupyter-book build`` with execution off (chapters are already executed).

    Run through this interpreter (jupyter-book has no ``__main__``) so the
    venv's jupyter-book is used even when ``.venv/bin`` is not on PATH.
    ``strict`` turns every Sphinx warning into an error (``-W``, after the
    whole build: ``--keep-going``). The HTML goes to
    ``<output_dir or book_root>/_build/html``, which is returned.
    """
    cmd = [
        sys.executable,
        "-c",
        "from jupyter_book.cli.main import main; main()",
        "build",
        str(book_root),
        "--builder",
        "html",
        "--keep-going",
    ]
    if strict:
        cmd.append("-W")
    if output_dir is not None:
        cmd += ["--path-output", str(output_dir)]
    print(f"[ltv-book] {' '.join(cmd[3:])}", flush=True)
    res = subprocess.run(cmd, check=False)
    if res.returncode != 0:
        raise SystemExit(f"jupyter-book build failed (exit {res.returncode})")
    html = (output_dir or book_root) / "_build" / "html"
    print(f"[ltv-book] HTML: {html / 'index.html'}")
    return html


# ------------------------------------------------------------- sphinx extension
#
# ``_config.yml`` loads this module as a Sphinx extension (``sphinx.extra_extensions``): it adds the
# ``{verdict-table}`` directive that renders the landing page's verdicts from ``results/claims/`` of the book
# root being built (so a staged run's landing page shows that run's verdicts), and the ``{verdict}`` role, a
# coloured badge.

VERDICT_BADGE_CLASS = "ltv-badge"


def _table_cell(text: str) -> str:
    """Text safe inside a MyST pipe-table cell."""
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())


def verdict_table_markdown(book_root: Path) -> str:
    """The landing page's compact verdict table as MyST: one row per recorded claim, in table-of-contents order,
    with the paper's number, ours, a ``{verdict}`` badge and links to the evidence and the chapter; then a line
    counting the verdicts (:func:`ltvlib.book.scorecard.summary_markdown`)."""
    from ltvlib.book.scorecard import load_sheets, summary_markdown

    sheets = load_sheets(book_root)
    if not any(s.claims for s in sheets):
        return "No chapter has recorded a verdict in this build yet (`results/claims/` is empty)."
    out = [
        summary_markdown(sheets),
        "",
        "| claim | the paper | ours | verdict | evidence |",
        "|---|---|---|---|---|",
    ]
    for sheet in sheets:
        for c in sheet.claims:
            doc = f"/{CHAPTER_DIR}/{sheet.chapter}"
            out.append("| " + " | ".join([
                f"{c.paper_claim}. {_table_cell(c.statement)}",
                _table_cell(c.paper),
                _table_cell(c.ours),
                f"{{verdict}}`{_table_cell(c.verdict.value)}`",
                f"{{ref}}`{_table_cell(c.evidence_title)} <{c.evidence}>` in {{doc}}`ch. {sheet.chapter[:2]} <{doc}>`",
            ]) + " |")
    return "\n".join(out)


def _verdict_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{verdict}`reproduced``` -> ``<span class="ltv-badge ltv-badge-reproduced">reproduced</span>``."""
    from docutils import nodes

    node = nodes.inline(rawtext, text, classes=[VERDICT_BADGE_CLASS, f"{VERDICT_BADGE_CLASS}-{verdict_slug(text)}"])
    return [node], []


def _verdict_table_directive() -> type:
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    class VerdictTable(SphinxDirective):
        """``{verdict-table}``: :func:`verdict_table_markdown` of the book root being built, parsed as MyST."""

        has_content = False

        def run(self) -> list[nodes.Node]:
            root = Path(self.env.srcdir)
            # the page depends on the claims: rebuild it when any changes
            for path in sorted((root / CLAIMS_DIR).glob("*.json")):
                self.env.note_dependency(str(path))
            container = nodes.container(classes=["ltv-verdicts"])
            self.state.nested_parse(
                StringList(verdict_table_markdown(root).splitlines(), source="results/claims"),
                self.content_offset,
                container,
            )
            return [container]

    return VerdictTable


def setup(app: Any) -> dict[str, Any]:
    """Sphinx entry point (see the section comment above)."""
    app.add_role("verdict", _verdict_role)
    app.add_directive("verdict-table", _verdict_table_directive())
    return {"parallel_read_safe": True, "parallel_write_safe": True}


# --------------------------------------------------------------------------- cli


def build(
    root: Path,
    params: dict[str, Any],
    prefixes: Sequence[str] | None = None,
    *,
    force: bool = False,
    html: bool = True,
    keep_going: bool = False,
) -> Path:
    """Execute the selected chapters, then build HTML.

    Args:
        root: repository root holding ``_toc.yml``.
        params: notebook parameters; the default setting writes into ``chapters/``,
            any other into :func:`staging_dir`.
        prefixes: chapter-name prefixes to execute (all if empty).
        force: re-execute chapters whose stamp matches.
        html: run ``jupyter-book build`` afterwards.
        keep_going: after a chapter fails, report it and execute the others (a long build is not lost to one
            failure); the build still ends with an error naming every failed chapter, and renders no HTML.

    Returns:
        The book root that was built (``root`` or the staging dir).
    """
    chapters = read_chapters(root)
    selected = select_chapters(chapters, prefixes)
    in_place = is_default(params)
    book_root = root if in_place else staging_dir(root, params)
    if not in_place:
        stage_tree(root, book_root, chapters)
    if html and in_place:
        # fail before hours of execution, not after: an in-place build renders the
        # full toc, so every other chapter needs its committed notebook
        chosen = {c.docname for c in execution_order(chapters, selected)}
        missing = [c for c in chapters if c.docname not in chosen and not c.ipynb.exists()]
        if missing:
            names = " ".join(c.name[:2] for c in missing)
            raise SystemExit(
                f"no executed notebook for {names}: add --chapters {names}, drop --chapters, or use --no-html"
            )
    print(f"[ltv-book] params {params}; writing to {book_root}", flush=True)

    kernel_name: str | None = None
    total = 0.0
    failed: list[str] = []
    for chapter in execution_order(chapters, selected):
        target = book_root / f"{chapter.docname}.ipynb"
        # computed only now: a RUN_LAST chapter reads the results the chapters before it just wrote
        stamp = make_stamp(chapter, params, inputs=claims_digest(book_root) if runs_last(chapter) else None)
        if not force and up_to_date(target, stamp):
            print(f"[ltv-book] {chapter.name}: up to date, skipped", flush=True)
            continue
        kernel_name = kernel_name or ensure_kernel()
        print(f"[ltv-book] {chapter.name}: executing", flush=True)
        try:
            seconds = execute_chapter(
                chapter,
                params,
                target,
                kernel_name=kernel_name,
                work_dir=book_root / "_build" / "executing",
                book_root=book_root,
                stamp=stamp,
            )
        except ChapterError as exc:
            if not keep_going:
                raise SystemExit(f"[ltv-book] ERROR {exc}") from exc
            print(f"[ltv-book] ERROR {exc}\n[ltv-book] {chapter.name}: failed; going on (--keep-going)", flush=True)
            failed.append(chapter.name)
            continue
        total += seconds
        peak = run_record(target).get("peak_rss_bytes", 0)
        print(f"[ltv-book] {chapter.name}: {seconds:.1f} s, peak kernel memory {peak / 2**30:.2f} GiB", flush=True)
    print(f"[ltv-book] executed in {total:.1f} s total", flush=True)
    if failed:
        raise SystemExit(f"[ltv-book] ERROR {len(failed)} chapter(s) failed: {' '.join(failed)} (no HTML rendered)")

    if html:
        missing = [c for c in chapters if not (book_root / f"{c.docname}.ipynb").exists()]
        strict = True
        if missing:  # only possible when staged (checked above for in-place)
            # a staged subset: leave the other chapters out of its toc; links to
            # them would be broken, so warnings are reported but not fatal
            toc = filter_toc(load_toc(root), {c.docname for c in missing})
            atomic_write_text(book_root / "_toc.yml", yaml.safe_dump(toc, sort_keys=False))
            strict = False
        build_html(book_root, strict=strict)
    return book_root


def default_root() -> Path:
    cwd = Path.cwd()
    return cwd if (cwd / "_toc.yml").exists() else Path(__file__).resolve().parents[2]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m ltvlib.book", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=None, help="book root (holds _toc.yml)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list chapters in _toc.yml order")
    t = sub.add_parser("tidy", help="clean the committed notebooks' outputs in place (stamps unchanged)")
    t.add_argument("--chapters", nargs="+", metavar="PREFIX", help="e.g. 00 03_icl")
    b = sub.add_parser("build", help="execute chapters and render HTML")
    b.add_argument("--profile", default=DEFAULT_PROFILE, choices=PROFILES)
    b.add_argument("--model", default=DEFAULT_MODEL)
    b.add_argument("--seed", type=int, default=DEFAULT_SEED)
    b.add_argument("--device", default=DEFAULT_DEVICE)
    b.add_argument("--chapters", nargs="+", metavar="PREFIX", help="e.g. 00 03_icl")
    b.add_argument("--no-html", action="store_true", help="execute only")
    b.add_argument("--force", action="store_true", help="re-execute even if up to date")
    b.add_argument("--keep-going", action="store_true",
                   help="after a chapter fails, execute the others; exit with an error naming the failed ones")
    b.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        default=[],
        metavar=("KEY", "VALUE"),
        help="extra notebook parameter (repeatable)",
    )
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    root = (args.root or default_root()).resolve()
    if args.cmd == "list":
        for c in read_chapters(root):
            status = "" if c.py.exists() else "  (missing .py)"
            print(f"{c.name}\t{c.docname}.py{status}")
        return 0
    if args.cmd == "tidy":
        for c in select_chapters(read_chapters(root), args.chapters):
            if c.ipynb.exists():
                changed = tidy_file(c.ipynb)
                print(f"[ltv-book] {c.name}: {'tidied' if changed else 'already tidy'}")
        return 0
    params: dict[str, Any] = {"model": args.model, "profile": args.profile, "seed": args.seed, "device": args.device}
    for key, value in args.param:
        params[key] = parse_value(value)
    t0 = time.perf_counter()
    build(root, params, args.chapters, force=args.force, html=not args.no_html, keep_going=args.keep_going)
    print(f"[ltv-book] done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
