"""Ray's `ray.util.rpdb` (also `ray.util.pdb`): breakpoints in tasks and actors, reached from another terminal
with `ray debug`. phalanx refuses it, saying why (NotImplementedError): a task's worker has no terminal, and
phalanx opens no listener that would run debugger commands a connection sends it (every listener of phalanx
authenticates and none executes what a peer sends). What works instead: call the function undecorated in the
driver (or `fn._function(...)`), where `breakpoint()` is Python's own, or print: what tasks and actors print
reaches the driver, prefixed with where it ran."""

WHY = ("phalanx has no remote debugger (ray.util.rpdb): a task's worker has no terminal, and phalanx opens no "
       "listener that would run debugger commands sent to it. Debug the function in the driver instead (call it "
       "undecorated, where breakpoint() is Python's own), or print: what tasks print reaches the driver.")


def set_trace(breakpoint_uuid=None):
    """Ray's breakpoint in a task or actor: refused (see WHY)."""
    raise NotImplementedError(WHY)


def post_mortem():
    """Ray's post-mortem debugger of a failed task: refused (see WHY)."""
    raise NotImplementedError(WHY)
