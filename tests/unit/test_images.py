"""hack/build-images.sh keeps an image when the hash of its inputs is unchanged (its label io.gpu-acceptance.inputs).
Its OPERATOR_FILES and WORKLOAD_FILES name those inputs: a file a Dockerfile COPYs from the build context but the
list leaves out would change without a rebuild, and `make images` would keep an image built from the old file.
The build context itself (.dockerignore) must let in every file COPYed, and nothing the lists do not name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = (REPO / "hack" / "build-images.sh").read_text()


def bash_list(text: str, name: str) -> set[str]:
    m = re.search(rf"^{name}=\((.*)\)$", text, flags=re.M)
    assert m, f"{name}=(...) missing"
    return set(m.group(1).split())


def copied_from_context(dockerfile: str) -> set[str]:
    """The build-context paths a Dockerfile COPYs (not those COPY --from another stage)."""
    text = (REPO / dockerfile).read_text().replace("\\\n", " ")
    paths = set()
    for m in re.finditer(r"^COPY\s+(.*)$", text, flags=re.M):
        words = m.group(1).split()
        if not any(w.startswith("--from") for w in words):
            paths |= {w.rstrip("/") for w in words[:-1] if not w.startswith("--")}
    return paths


@pytest.mark.parametrize(("image", "listed"), [("operator", "OPERATOR_FILES"), ("workload", "WORKLOAD_FILES")])
def test_an_images_inputs_are_its_dockerfile_and_every_file_it_copies(image: str, listed: str) -> None:
    dockerfile = f"Dockerfile.{image}"
    inputs = bash_list(BUILD, listed)
    assert inputs == {dockerfile} | copied_from_context(dockerfile), (
        f"hack/build-images.sh {listed} must name {dockerfile} and what it COPYs")
    staged = bash_list((REPO / "hack" / f"install-{image}.sh").read_text(), "IMAGE_FILES")
    assert inputs == {dockerfile} | staged, f"hack/install-{image}.sh IMAGE_FILES stages another set"
    for path in inputs:
        assert (REPO / path).exists(), path


def test_the_build_context_lets_in_exactly_what_the_dockerfiles_copy() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    let_in = {line[1:] for line in ignore if line.startswith("!")}
    assert next(line for line in ignore if not line.startswith("#")) == "*"  # all out, then let in
    assert let_in == copied_from_context("Dockerfile.operator") | copied_from_context("Dockerfile.workload")
