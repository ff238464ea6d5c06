"""pytest imports test files without packages (rootdir-relative basenames), so two test files
with the same basename in different folders make collection fail with 'import file mismatch'
on a clean checkout. Each test file's basename must be unique across tests/python."""

import collections
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_test_file_basenames_are_unique():
    seen = collections.defaultdict(list)
    for root, _dirs, files in os.walk(TESTS):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                seen[name].append(os.path.relpath(os.path.join(root, name), TESTS))
    duplicates = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not duplicates, duplicates
