"""The docs as a site: every link and anchor between README.md and docs/ resolves, docs/checks.md's result index is
the one the rule table generates, and the README's quick start stays short and complete."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from acceptance_workload import result_index
from acceptance_workload.checks.table import RULES

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for match in re.finditer(r"^(#{1,6})\s+(.+?)\s*#*$", FENCE.sub("", page.read_text()), re.M):
        s = slug(match.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text())) if not t.startswith(("http://", "https://",
                                                                                         "mailto:"))]


def test_the_slug_is_githubs():
    assert slug("## 1. Prerequisites in the cluster".lstrip("# ")) == "1-prerequisites-in-the-cluster"
    assert slug("A real node on one machine: `make real-node`") == "a-real-node-on-one-machine-make-real-node"
    assert slug("Images and the real node (2026-11-27)") == "images-and-the-real-node-2026-11-27"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_and_anchor_resolves(page: Path):
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no such heading in {resolved.name}")
    assert not broken, f"{page.name}: {broken}"


def test_the_result_index_is_the_generated_one():
    """Regenerate with `python -m acceptance_workload.result_index --write docs/checks.md`."""
    doc = (REPO / "docs" / "checks.md").read_text()
    assert result_index.replaced(doc) == doc, "docs/checks.md's result index differs from the rule table's"
    for check, name in RULES:
        assert f"`{name}`" in doc, (check, name)


def test_readme_opens_with_a_short_quick_start_that_has_what_a_gpu_cluster_needs():
    readme = (REPO / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", FENCE.sub("", readme), re.M)
    assert headings[0] == "Quick start: a first GPU test", headings
    quick = readme.split("## Quick start: a first GPU test", 1)[1].split("\n## ", 1)[0]
    assert len(quick.splitlines()) <= 60
    for needed in ("nvidia.com/gpu", "pod-security.kubernetes.io/enforce=privileged", "make images push REGISTRY=",
                   "imagePullSecrets[0]=", "workloadImagePullSecrets[0]=", "pip install", "helm install",
                   "examples/quick.yaml", "kubectl get at quick", "gpu-acceptance report quick", "backend: Job",
                   "No image is published"):
        assert needed in quick, needed
    # CI's command and the main job's stay in the README.
    assert "make install tools images && make test" in readme
    assert "gpu-acceptance local --json report.json" in readme
