"""The mutation catalogue (``tests/mutation_check.py``, run by hand) stays in step with the code."""

import mutation_check as mc


def test_every_mutant_still_applies():
    """A guard or formula whose text changed leaves its mutant stale: update it with the code."""
    assert not mc.stale(mc.MUTANTS), f"stale mutants: {mc.stale(mc.MUTANTS)}"


def test_mutants_are_named_once_and_name_existing_tests():
    names = [m.name for m in mc.MUTANTS]
    assert len(names) == len(set(names))
    missing = {t for m in mc.MUTANTS for t in m.tests if not _exists(t)}
    assert not missing, f"mutants name tests that do not exist: {sorted(missing)}"


def _exists(test: str) -> bool:
    """A test file, or one of its tests (``path::name``)."""
    path, _, name = test.partition("::")
    path = mc.REPO / path
    return path.is_file() and (not name or f"def {name}(" in path.read_text())


def test_a_mutant_changes_its_file():
    m = mc.Mutant("x", "f.py", "a < b", "a <= b", (), nth=1)
    assert mc.mutated("a < b; a < b", m) == "a < b; a <= b"
    assert mc.mutated("a < b", m) is None
    assert mc.mutated("a < b; a < b", mc.Mutant("x", "f.py", "a < b", "c", ())) is None  # not unique
