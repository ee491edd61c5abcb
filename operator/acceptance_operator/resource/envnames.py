"""Environment variable names pod.env and network.env may not set: the operator's, the kubelet's, the project's.

Apart from api.py (which re-exports them) so the API module stays one screenful of models.
"""

from __future__ import annotations

# Variables the operator sets on the workload itself; pod.env / network.env must not replace them.
RESERVED_ENV = ("GPU_ACCEPTANCE_CONFIG", "NODE_NAME", "POD_NAME", "POD_NAMESPACE", "MASTER_ADDR", "MASTER_PORT")
# Families of names pod.env / network.env must not set, each with why: the kubelet's pointers to the API server
# (the workload's client sends its bearer token there) and every setting of the operator and the workload.
RESERVED_ENV_PREFIXES: dict[str, str] = {
    "KUBERNETES_SERVICE_": "the kubelet's address of the API server; the workload's client would send its token "
                           "wherever it points",
    "KUBERNETES_PORT": "the kubelet's address of the API server; the workload's client would send its token "
                       "wherever it points",
    "GPU_ACCEPTANCE_": "the operator's and the workload's own settings",
}


def reserved_env_problem(name: str) -> str | None:
    """Why `name` may not be set in pod.env or network.env, or None. The run's identity and rendezvous come from the
    operator (a user value would silently break them); the API server's address and the project's settings are not
    the user's to redirect (RESERVED_ENV_PREFIXES)."""
    if name in RESERVED_ENV:
        return "set by the operator for every run; remove it from env"
    for prefix, why in RESERVED_ENV_PREFIXES.items():
        if name.startswith(prefix):
            return f"names starting with {prefix} are reserved ({why}); remove it from env"
    return None


def _not_reserved(name: str) -> str:
    problem = reserved_env_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def _reserved_env_rules() -> list[dict[str, str]]:
    """The same refusal as reserved_env_problem, as CEL rules on the env map (admission): one per family."""
    names = ", ".join(f"'{n}'" for n in RESERVED_ENV)
    return [{"rule": f"self.all(k, !(k in [{names}]))",
             "message": f"{', '.join(RESERVED_ENV)}: set by the operator for every run; remove them from env"},
            *({"rule": f"self.all(k, !k.startsWith('{prefix}'))",
               "message": f"names starting with {prefix} are reserved ({why}); remove them from env"}
              for prefix, why in RESERVED_ENV_PREFIXES.items())]
