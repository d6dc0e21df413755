"""Secrets never leave the configuration: credentials in URLs masked wherever text is written.

>>> mask_secrets("Qdrant at http://admin:hunter2@db:6333/?api_key=k1 is unavailable")
'Qdrant at http://admin:***@db:6333/?api_key=*** is unavailable'
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://user:password@ (the password may hold '@': the userinfo ends at the last '@' before
# the host) and scheme://token@ (a token as the user name).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#]*)@")
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:api[_-]?key|apikey|key|token|access[_-]?token|auth|password|passwd|pwd|secret"
    r"|client[_-]?secret|sig|signature)=)[^&#\s]*",
    re.IGNORECASE,
)


def mask_secrets(text: str) -> str:
    """``text`` with the credentials of every URL in it masked: the password of
    ``scheme://user:password@host`` (a user name alone, possibly a token, entirely) and
    query-string secrets such as ``api_key=``."""
    return _QUERY_SECRET.sub(rf"\g<name>{MASK}", _USERINFO.sub(_masked_userinfo, text))


def _masked_userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}:{MASK}@" if colon else f"{match['scheme']}{MASK}@"
