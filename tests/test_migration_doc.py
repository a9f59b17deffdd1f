"""docs/migration.md names only flowrl keys that exist."""

import re
from pathlib import Path

from flowrl.config_reference import reference

DOC = Path(__file__).parent.parent / "docs" / "migration.md"


def test_every_flowrl_key_in_the_migration_table_exists():
    known = set(re.findall(r"^\| `([^`]+)` \|", reference(), flags=re.M))
    rows = [line.split("|") for line in DOC.read_text().splitlines() if line.startswith("| `")]
    named = [key for cells in rows for key in re.findall(r"`([^`]+)`", cells[2])]
    assert len(named) >= 40
    assert set(named) <= known, sorted(set(named) - known)
