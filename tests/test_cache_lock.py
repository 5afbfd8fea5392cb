"""tests/helpers/cache_lock.py: what the pytest-xdist workers share in ``.cache/``."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.helpers.cache_lock import put

SCRIPT = "console.log('a node script the tests run');\n" * 200


def test_a_shared_script_is_never_read_half_written(tmp_path: Path) -> None:
    """Two workers run the same node test (its parameters): one rewrites the script while
    the other's node reads it. ``write_text`` truncates first, so a reader can find it empty;
    ``put`` replaces it whole."""
    script = put(tmp_path / "script.mjs", SCRIPT)
    writer = threading.Thread(target=lambda: [put(script, SCRIPT) for _ in range(2000)])
    writer.start()
    seen = set()
    while writer.is_alive():
        seen.add(script.read_text())
    writer.join()
    assert seen <= {SCRIPT}
    assert [p.name for p in tmp_path.iterdir()] == ["script.mjs"]  # no temporary file left
