"""`memory_scope`: a conversation's stored `tenant` and its inverse, which the background
derivation of message search uses to give each tenant one turn and one share (a write's listener
holds only the stored form)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mongogate.memory_scope import MemoryScope, tenant_of_stored

#: what auth lets a tenant be: no control characters (so U+001F never appears in one)
TENANTS = st.text(st.characters(exclude_categories=["Cc", "Cs"]), min_size=1, max_size=40)
SUBJECTS = st.none() | st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@given(TENANTS, SUBJECTS)
def test_the_tenant_of_any_stored_scope_is_the_scope_tenant(tenant: str, subject: str | None) -> None:
    """A subject holding the separator, or anything else, never changes whose tenant it is."""
    assert tenant_of_stored(MemoryScope(tenant, subject).stored_tenant) == tenant
