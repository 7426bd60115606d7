"""Internal package: the language layer both generations' public facades adapt (as `jax._src` under `jax.lax`).

Not a public module path: NKI has no `nki._src`; kernels import `opennki.language` / `opennki.legacy.language`.
"""
