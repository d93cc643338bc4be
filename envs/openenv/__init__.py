"""OpenEnv both ways: train on any OpenEnv environment by URL (`openenv:http://HOST:PORT`, client.py), and
serve any of our host envs as an OpenEnv environment (`python -m envs.serve --protocol openenv`, server.py)."""
