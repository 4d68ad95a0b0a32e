"""The admin key (--admin-key): read from a file or an environment variable, never from the command line, and the
check of a request's X-Admin-Key header against it (POST /admin/reload, aiayn.serve.reload)."""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from fastapi import Request
from fastapi.responses import JSONResponse

MIN_KEY_CHARS = 16


def read_admin_key(where: str) -> str:
    """The admin key from `where`: a file holding it (its first line), or env:NAME for an environment variable. Never
    the key itself: a command line is visible to every user of the machine (ps). Errors never show the key."""
    if where.startswith("env:"):
        key = os.environ.get(where[4:], "")
        if not key:
            raise ValueError(f"--admin-key {where}: the environment variable {where[4:]} is not set or empty")
    else:
        path = Path(where)
        if not path.is_file():
            raise ValueError("--admin-key takes a file holding the key, or env:NAME for an environment variable, not "
                             "the key itself (a command line is visible to every user of the machine); no such file")
        lines = path.read_text(encoding="utf-8").splitlines()
        key = lines[0].strip() if lines else ""
    if len(key) < MIN_KEY_CHARS:
        raise ValueError(f"the admin key (--admin-key) has fewer than {MIN_KEY_CHARS} characters; make one with: "
                         "python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return key


def refusal(request: Request, key: bytes | None) -> JSONResponse | None:
    """None if the request carries the admin key `key`, else the 403 to answer."""
    if key is None:
        return JSONResponse({"error": "admin routes are off: start the server with --admin-key"}, status_code=403)
    given = request.headers.get("x-admin-key", "").strip()
    if not given:
        return JSONResponse({"error": "this route needs the admin key: send it as an X-Admin-Key: KEY header"},
                            status_code=403)
    if not hmac.compare_digest(given.encode(), key):
        return JSONResponse({"error": "the admin key is not valid"}, status_code=403)
    return None
