"""The layout is the architecture: the library's stages import only stages below them, each process package imports
only the library, the pipelines import the library and the processes, nothing imports the CLI, the benchmarks
(``benchmarks/``) use everything but the CLI and the studies, the studies (``experiments/STUDY/``) use everything but
the CLI and no other study (what several share sits in ``experiments/common/``), nothing outside ``experiments/`` uses
them, no module is part of an import cycle, and no module is over the size cap (both wings included)."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

from tests.helpers import ROOT

# note: lower layers never import higher ones; pretrain and qa are siblings (neither imports the other)
LIBRARY_LAYERS = [
    ["realm.core"],
    ["realm.data"],
    ["realm.models"],
    ["realm.run"],
    ["realm.index"],
    ["realm.training"],
    ["realm.pretrain", "realm.qa", "realm.knnlm"],
]
PROCESSES = ["realm.trainer", "realm.index_builder", "realm.warmstart", "realm.finetune", "realm.knnlm_jobs"]
PIPELINES = "realm.pipeline"
CLI = "realm.cli"
BENCHMARKS = "benchmarks"
"""The speed checks, run as ``python -m benchmarks.X``."""
EXPERIMENTS = "experiments"
"""The studies, one package each (``experiments.real_text``), run as ``python -m experiments.STUDY.X``."""
SHARED = "experiments.common"
"""What several studies use (exact tests, cloze evaluation, the memoriser, retrieval accuracy): not a study."""
MAX_MODULE_LINES = 400


def setup_options() -> configparser.SectionProxy:
    """setup.cfg's ``[options]``: what ``pip install`` installs, and under which names."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser["options"]


def package_folders() -> dict[str, Path]:
    """Import package -> its folder, as setup.cfg's ``package_dir`` installs them (``realm.trainer`` is
    ``trainer/``), plus the two wings of scripts, which are not installed."""
    pairs = (line.split("=") for line in setup_options()["package_dir"].strip().splitlines())
    wings = {BENCHMARKS: ROOT / BENCHMARKS, EXPERIMENTS: ROOT / EXPERIMENTS}
    return {**{name.strip(): ROOT / folder.strip() for name, folder in pairs}, **wings}


def _modules() -> dict[str, Path]:
    found = {}
    folders = package_folders()
    # note: a mapped folder inside realm/ would be walked twice, under two names
    assert not any(ROOT / "realm" in folder.parents for folder in folders.values()), folders
    for package, folder in folders.items():
        for path in sorted(folder.rglob("*.py")):
            name = ".".join((package, *path.relative_to(folder).with_suffix("").parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Project modules ``path`` imports (at any depth of the file, TYPE_CHECKING blocks included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def _group(module: str) -> str:
    """``realm.<stage>``, a process package (``realm.trainer``), the pipelines, the CLI, the benchmarks or one study
    (``experiments.<study>``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in ("realm", EXPERIMENTS) else parts[0]


def _is_study(group: str) -> bool:
    return group.partition(".")[0] == EXPERIMENTS and group != SHARED


def _rank(group: str) -> int | None:
    for rank, layer in enumerate(LIBRARY_LAYERS):
        if group in layer:
            return rank
    return None


def test_each_library_module_sits_in_a_stage_package():
    jobs = {*PROCESSES, PIPELINES, CLI}
    loose = [m for m in _modules() if m.startswith("realm.") and _group(m) not in jobs and _rank(_group(m)) is None]
    assert not loose, f"library modules outside the stage packages: {loose}"


def test_no_upward_or_sideways_imports():
    modules = _modules()
    wrong = []
    for module, path in modules.items():
        source = _group(module)
        for target in _imports(path, modules):
            dest = _group(target)
            if dest == source:
                continue
            if _rank(source) is not None:
                ok = _rank(dest) is not None and _rank(dest) < _rank(source)
            elif source in PROCESSES:
                ok = _rank(dest) is not None
            elif source == PIPELINES:
                ok = _rank(dest) is not None or dest in PROCESSES
            elif source == BENCHMARKS:  # a benchmark may use everything but the command line (it runs it instead)
                ok = dest != CLI and not _is_study(dest)
            elif source == SHARED:  # what the studies share uses no study
                ok = dest != CLI and not _is_study(dest)
            elif _is_study(source):  # a study uses no other study: what two share sits in experiments.common
                ok = dest != CLI and not _is_study(dest)
            else:  # the CLI may use everything but the two wings
                ok = dest not in (BENCHMARKS, SHARED) and not _is_study(dest)
            if not ok:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_no_import_cycles():
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            # a package's __init__ importing its own submodules is not a cycle worth reporting
            if state.get(nxt) == 1 and not nxt.startswith(node + ".") and not node.startswith(nxt + "."):
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_is_over_the_size_limit():
    sizes = {m: len(p.read_text().splitlines()) for m, p in _modules().items()}
    over = {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concept): {over}"


README_MAX_LINES = 200
README_MAX_RESULT_LINES = 15


def _readme_tree() -> str:
    """The README's architecture block: the fenced block under "## Architecture"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Architecture", 1)[1]
    return section.split("```", 2)[1]


def test_the_readme_is_a_map_whose_tree_names_every_top_level_folder_of_code():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, "the README is the front page: results live in experiments/"
    results = text.split("## Results", 1)[1].split("\n## ", 1)[0].strip()
    assert len(results.splitlines()) <= README_MAX_RESULT_LINES, "the README's results link to the studies' pages"
    named = {line.split()[0].rstrip("/") for line in _readme_tree().splitlines() if line and not line[0].isspace()}
    folders = {p.name for p in ROOT.iterdir()
               if p.is_dir() and not p.name.startswith(".") and p.name != "tests" and any(p.glob("*.py"))}
    assert folders <= named, f"folders of code missing from the README's tree: {sorted(folders - named)}"
    for doc in ("docs/usage.md", "docs/recipe.md", "docs/qa.md", "docs/knnlm.md", "docs/performance.md",
                "benchmarks/README.md", "experiments/README.md"):
        assert doc in text and (ROOT / doc).is_file(), doc


def test_every_study_has_a_results_page_listed_in_the_experiments_table():
    table = (ROOT / EXPERIMENTS / "README.md").read_text()
    studies = sorted(p.name for p in (ROOT / EXPERIMENTS).iterdir()
                     if (p / "__init__.py").is_file() and _is_study(f"{EXPERIMENTS}.{p.name}"))
    missing = [s for s in studies
               if not (ROOT / EXPERIMENTS / s / "RESULTS.md").is_file() or f"({s}/RESULTS.md)" not in table]
    assert not missing, f"studies without a RESULTS.md linked from experiments/README.md: {missing}"
