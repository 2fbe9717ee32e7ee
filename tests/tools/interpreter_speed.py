"""The Triton interpreter without its redundant re-patching (CPU test runs only).

Under TRITON_INTERPRET=1, a kernel launch patches triton.language for the launch, and every
call of a @triton.jit helper from inside the kernel patches it again (triton 3.6's
interpreter.py: ``InterpretedFunction.__call__`` calls ``_patch_lang``), which walks the
modules with inspect.getmembers: about 2 ms per helper call, over a third of a chunked
kernel's interpreted time. When the helper sees no language module the launch did not
patch already, that second patch changes nothing, so it is skipped; anything else takes
Triton's own path. A helper call never restores its patch (``InterpretedFunction.__call__``
drops the scope), so a module a helper patched, ``triton.language.core`` for Triton's own
``tl.sum`` and ``tl.zeros``, counts as patched for the rest of the launch. The kernels run
the same code either way.
"""
from __future__ import annotations


def skip_redundant_language_patching() -> bool:
    """Install the shortcut; False (and nothing changed) where the interpreter is not the one
    it was written against."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang", None)
    if original is None or getattr(original, "skips_redundant_patching", False):
        return original is not None
    launches: list[set[int]] = []  # per launch in progress: the language modules it patched

    def languages(fn) -> set[int]:
        return {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}

    def patch_lang(fn):
        seen = languages(fn)
        if launches and seen <= launches[-1]:
            return None  # a helper called inside a launch: already patched (its caller drops the scope)
        scope = original(fn)
        if launches:
            # A helper of Triton's own (tl.sum, tl.zeros: their module sees triton.language.core)
            # patched a module the launch had not. Triton never restores a helper's patch, so the
            # module stays patched: later helpers that see it need not walk it again.
            launches[-1] |= seen
            return scope
        launches.append(seen)
        restore = scope.restore

        def leave():  # GridExecutor.__call__ restores the scope in a finally block
            launches.pop()
            restore()

        scope.restore = leave
        return scope

    patch_lang.skips_redundant_patching = True
    interpreter._patch_lang = patch_lang
    return True
