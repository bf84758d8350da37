"""Triton's CPU interpreter without its per-call re-patching of ``triton.language``.

How CI and CPU-only development run the kernels (``TRITON_INTERPRET=1``). The interpreter
(triton 3.4-3.6) patches ``triton.language`` to its numpy builder when a launch starts and
restores it when the launch ends; it also patches it again on every call of a nested
``@triton.jit`` helper, inside the launch, where the language is already patched. Each of
those patches walks the language's modules with ``inspect.getmembers``, and our kernels call
helpers in loops: in ``tests/ops/test_mamba2_replay.py``'s 16-step cycle test, 22,530
patches took 19 of its 54 seconds (cProfile).

:func:`skip_nested_patches` keeps the first patch of a launch and skips a helper's patch
when every language module the helper sees was patched by that launch. Launches, and what
the language does inside them, are unchanged. Applied by :mod:`._runtime` when the
interpreter is on; a Triton whose interpreter lacks these internals is left alone.
"""

from __future__ import annotations

import inspect

_patched_langs: list = []  # the ids of the language modules the launch in progress patched
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
            _patched_langs.extend(langs)
            return scope
        if langs <= set(_patched_langs):
            return _NoChanges()  # a helper inside the launch, which patched all it sees
        _patched_langs.extend(langs)
        return _triton_patch_lang(fn)  # (Triton drops a helper's scope: the launch's restores all)

    _patch_lang._skips_nested = True
    interpreter._patch_lang = _patch_lang
    return True
