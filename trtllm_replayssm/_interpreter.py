"""Triton's CPU interpreter without two of its costs that change no result.

How CI and CPU-only development run the kernels (``TRITON_INTERPRET=1``); :func:`install`
is called by :mod:`._runtime` when the interpreter is on. A Triton whose interpreter lacks
the internals named here is left alone.

**Nested patches.** The interpreter (triton 3.6) patches ``triton.language`` to its numpy
builder when a launch starts and restores it when the launch ends; it also patches it again
on every call of a nested ``@triton.jit`` helper, inside the launch, where the language is
already patched. Each of those patches walks the language's modules with
``inspect.getmembers``, and our kernels call helpers in loops: in
``tests/ops/test_mamba2_replay.py``'s 16-step cycle test, 22,530 patches took 19 of its 54
seconds (cProfile).

:func:`skip_nested_patches` keeps the first patch of a launch and skips a helper's patch
when every language module the helper sees was patched by that launch. Launches, and what
the language does inside them, are unchanged.

**Overflow checks.** For every integer add, sub and mul the interpreter also redoes the
operation in int64 and compares it with the int32 range, then hands the comparison to a
device assert that it drops, as the compiler does, unless the options ask for debug (they
never do: the interpreter's options are fixed). :func:`skip_dropped_overflow_checks` turns
that work off where debug is off: a quarter of an e2e test's time
(``tests/e2e/test_hybrid_decode.py``, 17.0 -> 12.3 s), and the same kernels' results.
"""

from __future__ import annotations

import dataclasses
import inspect

_patched_langs: set = set()  # the ids of the language modules the launch in progress patched
_triton_patch_lang = None  # Triton's own patch, which the skip calls


class _LaunchScope:
    """A launch's patch scope: its ``restore`` (Triton calls it as the launch ends) ends it."""

    def __init__(self, scope):
        self._scope = scope

    def restore(self):
        _patched_langs.clear()
        self._scope.restore()


class _NoChanges:
    @staticmethod
    def restore():
        pass


def install() -> None:
    """Both skips (each leaves a Triton it does not recognise alone)."""
    skip_nested_patches()
    skip_dropped_overflow_checks()


def skip_dropped_overflow_checks() -> bool:
    """Turn off the interpreter's int32 overflow checks where their asserts are dropped;
    ``False`` where its internals differ or debug is on."""
    try:
        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        options = builder.options
        if options.debug or not options.sanitize_overflow:
            return False
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    except (ImportError, AttributeError, TypeError):
        return False
    return True


def skip_nested_patches() -> bool:
    """Install the skip in Triton's interpreter; ``False`` where its internals differ."""
    global _triton_patch_lang
    try:
        from triton.runtime import interpreter
        import triton.language as tl

        patch_lang = interpreter._patch_lang
        scope_class = interpreter._LangPatchScope
    except (ImportError, AttributeError):
        return False
    if getattr(patch_lang, "_skips_nested", False):
        return True
    if not callable(getattr(scope_class, "restore", None)):
        return False
    _triton_patch_lang = patch_lang
    lang_modules = (tl, tl.core)
    langs_of = {}  # a function's globals -> the language modules they hold

    def _patch_lang(fn):
        key = id(fn.__globals__)
        langs = langs_of.get(key)
        if langs is None:
            langs = langs_of[key] = {id(v) for v in fn.__globals__.values()
                                     if inspect.ismodule(v) and v in lang_modules}
        if not _patched_langs:  # a launch starts (launches do not nest); Triton restores its scope
            scope = _LaunchScope(_triton_patch_lang(fn))
            _patched_langs.update(langs)
            return scope
        if langs <= _patched_langs:
            return _NoChanges()  # a helper inside the launch, which patched all it sees
        _patched_langs.update(langs)
        return _triton_patch_lang(fn)  # (Triton drops a helper's scope: the launch's restores all)

    _patch_lang._skips_nested = True
    interpreter._patch_lang = _patch_lang
    return True
