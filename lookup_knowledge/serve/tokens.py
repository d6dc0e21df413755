"""Bearer tokens mapped to access scopes: each configured token is kept as its SHA-256 only, and a
presented token is compared with every one of them in constant time (``hmac.compare_digest``).

>>> token, entry = new_token("team-a", ["finance"])
>>> TokenTable([TokenConfig(**entry)]).caller(token).scope.filter
('finance', 'public')
>>> admin, entry = new_token("admin", unrestricted=True)
>>> TokenTable([TokenConfig(**entry)]).caller(admin).scope.restricted
False
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.provider import AccessToken

from lookup_knowledge.adapters.search import UNRESTRICTED, AccessScope
from lookup_knowledge.config import TokenConfig


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a request: the token's name (``None``: no tokens are configured) and the access
    scope its calls are made in: its principals', or every document for an unrestricted token
    (``None``: no tokens, ``access.principals``')."""

    name: str | None
    scope: AccessScope | None

    def session(self, session_id: str) -> str:
        """``session_id`` as kept for this caller: one token's sessions never meet another's."""
        return session_id if self.name is None else f"{self.name}/{session_id}"


ANONYMOUS = Caller(None, None)


def token_hash(token: str) -> str:
    """The hex SHA-256 of a token's UTF-8 bytes: what the configuration keeps of it."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token(
    name: str, principals: Sequence[str] = (), *, unrestricted: bool = False
) -> tuple[str, dict[str, Any]]:
    """A fresh random token (256 bits) and its ``serve.tokens`` entry (the hash, not the token):
    made as ``principals``, or ``unrestricted`` (:class:`TokenConfig` checks it is one of them)."""
    token = secrets.token_urlsafe(32)
    who = {"unrestricted": True} if unrestricted else {"principals": list(principals)}
    return token, {"name": name, "sha256": token_hash(token), **who}


def _caller(token: TokenConfig) -> Caller:
    return Caller(token.name, UNRESTRICTED if token.unrestricted else AccessScope.of(token.principals))


class TokenTable:
    """The configured tokens, as the MCP SDK's ``TokenVerifier`` (its bearer-auth middleware reads
    every request's ``Authorization`` header through :meth:`verify_token`)."""

    def __init__(self, tokens: Sequence[TokenConfig]) -> None:
        self._entries = [(bytes.fromhex(t.sha256), _caller(t)) for t in tokens]

    def __bool__(self) -> bool:
        return bool(self._entries)

    def callers(self) -> list[Caller]:
        """Every configured token's caller."""
        return [caller for _, caller in self._entries]

    def caller(self, token: str) -> Caller | None:
        """The caller of ``token``, or ``None``; every entry is compared (no early exit), each in
        constant time, so the time taken says nothing of which tokens exist."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for expected, caller in self._entries:
            if hmac.compare_digest(digest, expected):
                found = caller
        return found

    async def verify_token(self, token: str) -> AccessToken | None:
        caller = self.caller(token)
        if caller is None or caller.name is None or caller.scope is None:
            return None
        access = caller.scope.filter
        claims = {"unrestricted": True} if access is None else {"principals": list(access)}
        return AccessToken(token="", client_id=caller.name, scopes=[], claims=claims)


def caller_of(user: Any) -> Caller:
    """The caller a request authenticated as (Starlette's ``request.user``); :data:`ANONYMOUS`
    when it did not (only reached when no tokens are configured)."""
    token = getattr(user, "access_token", None)
    if not isinstance(token, AccessToken):
        return ANONYMOUS
    claims = token.claims or {}
    if claims.get("unrestricted") is True:
        return Caller(token.client_id, UNRESTRICTED)
    return Caller(token.client_id, AccessScope.of(claims.get("principals", ())))
