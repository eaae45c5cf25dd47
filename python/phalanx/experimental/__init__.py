"""Ray's `ray.experimental` names phalanx has: `tqdm_ray` (progress bars from tasks and actors, shown by the
driver). Ray's compiled-graph helpers of this package live in phalanx.dag."""
