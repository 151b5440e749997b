"""The family cases of the conformance suite, one module per layout; `support.registry` imports every one."""
