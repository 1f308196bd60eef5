"""docs/ninfer-flags.md is the flag table as a reader sees it, generated from the code that uses it."""

from __future__ import annotations

from ninferkit.engines.ninfer.builds import BUILDS
from ninferkit.engines.ninfer.flags import FLAGS, builds_with, field_of, markdown
from ninferkit.engines.ninfer.options import Serve
from tests.conftest import REPO

DOC = REPO / "docs" / "ninfer-flags.md"


def test_the_doc_is_current() -> None:
    assert DOC.read_text() == markdown(), "regenerate: python -m ninferkit.engines.ninfer.flags > docs/ninfer-flags.md"


def test_every_row_names_a_real_profile_field() -> None:
    for row in FLAGS:
        section, _, path = row.field.partition(".")
        assert section == "serve", row.field
        model: type = Serve
        for part in path.split("."):
            assert part in model.model_fields, row.field
            annotation = model.model_fields[part].annotation
            model = annotation if isinstance(annotation, type) else model


def test_every_option_of_a_row_is_one_some_build_has() -> None:
    options = set().union(*(build.options for build in BUILDS.values()))
    for row in FLAGS:
        assert builds_with(row), row.flag
        assert any(spelling in options for spelling in row.spellings), row.flag
        for spelling in row.spellings:
            assert field_of(spelling) == row.field
