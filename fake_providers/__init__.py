"""Simulated providers: external reality for crash tests (SPEC section 5)."""

__all__: list[str] = []
