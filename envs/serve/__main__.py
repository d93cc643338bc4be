"""`python -m envs.serve --env WebShop --port 8100`: serve a host env over HTTP, in our JSON protocol (server.py)
or, with `--protocol openenv`, as an OpenEnv environment (envs/openenv/server.py)."""

from __future__ import annotations

import argparse
import json

from envs.serve.server import EnvServer, service_limit_problems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a registered host env over HTTP.")
    parser.add_argument("--env", required=True, help='registered name (e.g. WebShop) or "package.module:Class"')
    parser.add_argument("--protocol", choices=("ragen", "openenv"), default="ragen",
                        help="ragen: our JSON endpoints (/reset, /step, ...); openenv: an OpenEnv environment "
                             "(WebSocket /ws sessions, for OpenEnv's clients)")
    parser.add_argument("--env-kwargs", default="{}",
                        help='JSON overrides of the env kwargs, e.g. \'{"split": "val"}\'')
    parser.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 to accept other machines)")
    parser.add_argument("--port", type=int, default=8100, help="0 picks a free port")
    parser.add_argument("--step-timeout", type=float, default=60.0, help="seconds one reset/step may take")
    parser.add_argument("--session-ttl", type=float, default=900.0, help="idle seconds before a session is closed")
    parser.add_argument("--max-sessions", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=256, help="threads running env calls (ragen protocol)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as e:
        parser.error(f"--env-kwargs is not valid JSON: {e}")
    if not isinstance(env_kwargs, dict):
        parser.error("--env-kwargs must be a JSON object")
    problems = service_limit_problems(step_timeout_s=args.step_timeout, session_ttl_s=args.session_ttl,
                                      max_sessions=args.max_sessions, workers=args.workers)
    if problems:
        parser.error("; ".join(problems))
    if args.protocol == "openenv":
        serve_openenv(args, env_kwargs)
        return
    server = EnvServer(args.env, args.host, args.port, env_kwargs=env_kwargs, verbose=args.verbose,
                       step_timeout_s=args.step_timeout, session_ttl_s=args.session_ttl,
                       max_sessions=args.max_sessions, workers=args.workers)
    print(f"env server ({args.env}) listening on {server.url}", flush=True)
    server.serve_until_interrupted(server.service.close)


def serve_openenv(args: argparse.Namespace, env_kwargs: dict) -> None:
    import uvicorn

    from envs.openenv.server import openenv_app

    app = openenv_app(args.env, env_kwargs, max_sessions=args.max_sessions, session_ttl_s=args.session_ttl,
                      step_timeout_s=args.step_timeout)
    print(f"OpenEnv server ({args.env}) listening on http://{args.host}:{args.port} (WebSocket /ws)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.verbose else "warning")


if __name__ == "__main__":
    main()
