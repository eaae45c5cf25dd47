def ray_exceptions():
    """`ray.exceptions` as a program reaches it after `import phalanx as ray`."""
    import phalanx as ray
    return ray.exceptions
