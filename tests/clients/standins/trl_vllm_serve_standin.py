"""Stand-in for `trl vllm-serve` (trl/scripts/vllm_serve.py at huggingface/trl f2cd577).

Follows:
- llm_worker(script_args, data_parallel_rank, master_port, connection) (:332): `from vllm import
  LLM` inside, builds the LLM (:343), sends {"status": "ready"} (:366), then serves commands
  from the pipe: "call" / "fire_and_forget" -> getattr(llm, method)(*args, **kwargs), the
  result sent back for "call" (:368-384); "shutdown" ends it.
- chunk_list(lst, n) (:388): n evenly distributed sublists.
- main(script_args) (:408): one Pipe and one worker per data-parallel rank, started with
  `Process(target=llm_worker, ...)` (:455-460) -- here a Thread (the worker looked up by its
  module-level name at that moment, as upstream); the /generate/ route `async def
  generate(request: GenerateRequest)` (:533-660): SamplingParams from the request (n, max_tokens,
  ...), chunk_list(prompts, data_parallel_size), one "call" of "generate" per worker with
  {"prompts", "sampling_params"} (:641), every answer received in order (:644), flattened:
  prompt_ids per prompt, completion_ids per completion. Upstream ends with uvicorn.run(app);
  here main() returns the routes instead of serving them.
Left out: images, logprobs, the other routes, the weight-sync communicator.
"""

import dataclasses
import threading
from itertools import chain
from multiprocessing import Pipe
from typing import Any, Dict, List, Optional


@dataclasses.dataclass
class ScriptArguments:
    model: str = "standin"
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    max_num_seqs: Optional[int] = None


def llm_worker(script_args: ScriptArguments, data_parallel_rank: int, master_port: int,
               connection: Any) -> None:
    from vllm import LLM

    llm = LLM(model=script_args.model, tensor_parallel_size=script_args.tensor_parallel_size,
              seed=data_parallel_rank, max_num_seqs=script_args.max_num_seqs)
    connection.send({"status": "ready"})
    while True:
        command = connection.recv()
        if command["type"] in ["call", "fire_and_forget"]:
            method = getattr(llm, command["method"])
            result = method(*command.get("args", ()), **command.get("kwargs", {}))
            if command["type"] == "call":
                connection.send(result)
        elif command["type"] == "shutdown":
            break


def chunk_list(lst: list, n: int) -> List[list]:
    k, r = divmod(len(lst), n)
    return [lst[i * k + min(i, r):(i + 1) * k + min(i + 1, r)] for i in range(n)]


@dataclasses.dataclass
class GenerateRequest:
    prompts: list
    images: Optional[list] = None
    n: int = 1
    max_tokens: int = 16
    logprobs: Optional[int] = 0


class Server:
    """What main() builds: the workers, their pipes and the routes by path."""

    GenerateRequest = GenerateRequest

    def __init__(self, connections: List[Any], threads: List[threading.Thread],
                 routes: Dict[str, Any]) -> None:
        self.connections, self.threads, self.routes = connections, threads, routes

    def shutdown(self) -> None:
        for c in self.connections:
            c.send({"type": "shutdown"})
        for t in self.threads:
            t.join(10.0)


def main(script_args: ScriptArguments) -> Server:
    from vllm import SamplingParams

    connections, threads = [], []
    for data_parallel_rank in range(script_args.data_parallel_size):
        parent_connection, child_connection = Pipe()
        thread = threading.Thread(target=llm_worker,  # a Process upstream
                                  args=(script_args, data_parallel_rank, 0, child_connection),
                                  daemon=True)
        thread.start()
        connections.append(parent_connection)
        threads.append(thread)
    for connection in connections:  # lifespan: every worker ready
        assert connection.recv().get("status") == "ready"

    async def generate(request: GenerateRequest) -> dict:
        prompts = [{"prompt_token_ids": p} for p in request.prompts]
        sampling_params = SamplingParams(n=request.n, max_tokens=request.max_tokens,
                                         logprobs=request.logprobs)
        chunked_prompts = chunk_list(prompts, script_args.data_parallel_size)
        for connection, chunk in zip(connections, chunked_prompts):
            if not chunk:
                chunk = [{"prompt_token_ids": [0]}]  # the placeholder upstream sends
            connection.send({"type": "call", "method": "generate",
                             "kwargs": {"prompts": chunk, "sampling_params": sampling_params}})
        all_outputs = [connection.recv() for connection in connections]
        all_outputs = [o for o, c in zip(all_outputs, chunked_prompts) if c]
        all_outputs = list(chain.from_iterable(all_outputs))
        return {"prompt_ids": [o.prompt_token_ids for o in all_outputs],
                "completion_ids": [list(c.token_ids) for o in all_outputs for c in o.outputs]}

    return Server(connections, threads, {"/generate/": generate})
