"""Stand-ins for the frameworks the trainer integrations meet (none of them installs here):
minimal copies of their call sites, written from the upstream sources at the pinned commits,
with the same class, method and argument names and the same call order. Each file names the
upstream file, commit and lines it follows. Not the frameworks: what they leave out (GPUs,
tokenizers, rewards, losses, Ray's processes) is said where it matters.

install(names) loads fresh copies of the stand-in files and registers them in sys.modules
under the real module names (parents created as empty packages), so that
`from trl.scripts import vllm_serve` or `import ray` in the integration code finds them;
uninstall() removes them. A fresh copy per test: no state (hooks, registries) leaks.
"""

import importlib.util
import os
import sys
import types
from typing import Dict, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))

# Real module name -> stand-in file.
FILES = {
    "ray": "ray_standin.py",
    "torch": "torch_standin.py",
    "vllm": "vllm_standin.py",
    "transformers": "transformers_standin.py",
    "trl.trainer.grpo_trainer": "trl_standin.py",
    "trl.scripts.vllm_serve": "trl_vllm_serve_standin.py",
    "verl.experimental.agent_loop.agent_loop": "verl_standin.py",
    "openrlhf.trainer.ray.vllm_engine": "openrlhf_vllm_engine_standin.py",
    "openrlhf.trainer.ppo_trainer": "openrlhf_ppo_trainer_standin.py",
    "openrlhf.trainer.ppo_trainer_async": "openrlhf_ppo_trainer_async_standin.py",
    "openrlhf.cli.train_ppo_ray": "openrlhf_train_ppo_ray_standin.py",
}
# Submodules a stand-in file provides besides itself: name -> attribute of the loaded module.
EXTRA = {
    "vllm": {"vllm.sampling_params": "sampling_params_module"},
    "torch": {"torch.distributed": "distributed"},
}

_installed: Dict[str, object] = {}


def _load(name: str, filename: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, filename))
    module = importlib.util.module_from_spec(spec)
    _register(name, module)  # before exec: its own imports (and pickling) find it by name
    spec.loader.exec_module(module)
    return module


def _register(name: str, module: types.ModuleType) -> None:
    sys.modules[name] = module
    _installed[name] = module
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent not in sys.modules:
            pkg = types.ModuleType(parent)
            pkg.__path__ = []  # a package
            sys.modules[parent] = pkg
            _installed[parent] = pkg
    for i in range(1, len(parts)):
        setattr(sys.modules[".".join(parts[:i])], parts[i], sys.modules[".".join(parts[:i + 1])])


def install(names: Iterable[str]) -> Dict[str, types.ModuleType]:
    """Loads the stand-ins for `names` (keys of FILES), in the order given, and returns them."""
    out = {}
    for name in names:
        module = _load(name, FILES[name])
        _register(name, module)
        for sub, attr in EXTRA.get(name, {}).items():
            _register(sub, getattr(module, attr))
        out[name] = module
    return out


def uninstall() -> None:
    """Removes every module install() registered (and the empty parents it made)."""
    for name in list(_installed):
        sys.modules.pop(name, None)
    _installed.clear()
