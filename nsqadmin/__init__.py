"""nsqadmin: the web UI and JSON API for an NSQ cluster (Starlette + Jinja2 on uvicorn, httpx upstream)."""
