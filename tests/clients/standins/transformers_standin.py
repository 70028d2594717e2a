"""Stand-in for transformers' Trainer loop and callbacks, as GRPOTrainer inherits them.

Read: huggingface/transformers src/transformers/trainer.py (Trainer._inner_training_loop) and
src/transformers/trainer_callback.py (CallbackHandler), as stored in the reference index at
2cda12cb (the snapshot was too large to fetch; the stored trainer.py carries a few lines that
are not upstream's, e.g. stable_train_warmup_steps -- only the event order is taken from it).

The order of the events in _inner_training_loop: on_train_begin; per epoch on_epoch_begin; per
micro-step `if step % args.gradient_accumulation_steps == 0: on_step_begin`, then
training_step(model, inputs, num_items_in_batch); on a sync step on_pre_optimizer_step,
optimizer.step(), on_optimizer_step, global_step += 1, on_step_end, _maybe_log_save_evaluate
(on_log, on_save when control.should_save), else on_substep_end; on_epoch_end; on_train_end.
CallbackHandler.call_event calls each callback's event by name with (args, state, control,
**kwargs) and keeps `control` when one returns None.
"""

from typing import Any, List, Optional


class TrainerCallback:
    pass


class TrainerState:
    def __init__(self) -> None:
        self.global_step = 0
        self.epoch = 0.0
        self.log_history: List[dict] = []


class TrainerControl:
    def __init__(self) -> None:
        self.should_log = False
        self.should_save = False
        self.should_evaluate = False
        self.should_training_stop = False
        self.should_epoch_stop = False


class TrainingArguments:
    def __init__(self, output_dir: str = "out", per_device_train_batch_size: int = 8,
                 gradient_accumulation_steps: int = 1, num_train_epochs: int = 1,
                 max_steps: int = -1, save_steps: int = 0, logging_steps: int = 1,
                 ddp_timeout: int = 1800, world_size: int = 1, **kwargs: Any) -> None:
        self.output_dir = output_dir
        self.per_device_train_batch_size = per_device_train_batch_size
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.num_train_epochs = num_train_epochs
        self.max_steps = max_steps
        self.save_steps = save_steps
        self.logging_steps = logging_steps
        self.ddp_timeout = ddp_timeout
        self.world_size = world_size
        for k, v in kwargs.items():
            setattr(self, k, v)


class CallbackHandler:
    def __init__(self, callbacks: List[Any]) -> None:
        self.callbacks = list(callbacks)

    def call_event(self, event: str, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        for callback in self.callbacks:
            result = getattr(callback, event)(args, state, control, **kwargs)
            if result is not None:
                control = result
        return control

    def __getattr__(self, event: str) -> Any:
        if not event.startswith("on_"):
            raise AttributeError(event)
        return lambda args, state, control, **kw: self.call_event(event, args, state, control,
                                                                  **kw)


class Trainer:
    def __init__(self, model: Any = None, args: Optional[TrainingArguments] = None,
                 train_dataset: Any = None, callbacks: Optional[List[Any]] = None) -> None:
        self.model = model
        self.args = args
        self.train_dataset = train_dataset
        self.callback_handler = CallbackHandler(callbacks or [])
        self.state = TrainerState()
        self.control = TrainerControl()

    def get_train_dataloader(self) -> List[Any]:
        raise NotImplementedError

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> float:
        inputs = self._prepare_inputs(inputs)  # as Trainer.training_step does first
        return self.compute_loss(model, inputs)

    def _prepare_inputs(self, inputs: Any) -> Any:
        return inputs

    def compute_loss(self, model: Any, inputs: Any) -> float:
        return 0.0

    def train(self) -> None:
        self._inner_training_loop()

    def _maybe_log_save_evaluate(self) -> None:
        args, h = self.args, self.callback_handler
        if args.logging_steps and self.state.global_step % args.logging_steps == 0:
            logs = {"num_tokens": float(self.state.global_step * 1000)}
            self.control = h.on_log(args, self.state, self.control, logs=logs)
        if args.save_steps and self.state.global_step % args.save_steps == 0:
            self.control.should_save = True
            self.control = h.on_save(args, self.state, self.control)
            self.control.should_save = False

    def _inner_training_loop(self) -> None:
        args, h = self.args, self.callback_handler
        dataloader = self.get_train_dataloader()
        gas = args.gradient_accumulation_steps
        self.control = h.on_train_begin(args, self.state, self.control)
        for epoch in range(args.num_train_epochs):
            self.control = h.on_epoch_begin(args, self.state, self.control)
            for step, inputs in enumerate(dataloader):
                if step % gas == 0:
                    self.control = h.on_step_begin(args, self.state, self.control)
                self.training_step(self.model, inputs, None)
                if (step + 1) % gas == 0:
                    self.control = h.on_pre_optimizer_step(args, self.state, self.control)
                    self.control = h.on_optimizer_step(args, self.state, self.control)
                    self.state.global_step += 1
                    self.state.epoch = epoch + (step + 1) / len(dataloader)
                    self.control = h.on_step_end(args, self.state, self.control)
                    self._maybe_log_save_evaluate()
                else:
                    self.control = h.on_substep_end(args, self.state, self.control)
                if 0 < args.max_steps <= self.state.global_step:
                    break
            self.control = h.on_epoch_end(args, self.state, self.control)
            if 0 < args.max_steps <= self.state.global_step:
                break
        self.control = h.on_train_end(args, self.state, self.control)
