"""MomentOptimizer: how LAMB and AdamW keep Adam's two moments, and where they update them.

Both optimizers keep, per parameter, a step counter and the moments ``exp_avg`` (m) and
``exp_avg_sq`` (v), and differ only in how m and v become a weight update. This base class owns
everything else, once for both:

- **32-bit states** (``states="32bit"``): m and v are tensors shaped and typed like the parameter,
  as torch's own Adam keeps them.
- **8-bit states** (``states="8bit"``): parameters of at least ``min_quantised`` elements keep m and
  v as blockwise dynamic 8-bit codes plus one float32 absmax per block (``core.optim.quant8``):
  ``exp_avg_codes``/``exp_avg_absmax`` and ``exp_avg_sq_codes``/``exp_avg_sq_absmax``, about 2
  bytes per element instead of 8. Small tensors (biases, norms) stay 32-bit: they cost little and
  are the most sensitive. Each update dequantises one parameter's moments, updates them and
  quantises them back, so the extra memory is one parameter's worth.
- v is stored as its **square root** (the unsigned map, so it stays >= 0). v = g**2 spans twice
  as many decades as g; stored directly, the small v of a block with one large gradient round to
  0 while their m does not, and m / (sqrt(v) + eps) jumps by orders of magnitude. sqrt(v) has
  m's range and is what the update divides by. On the demo model, 200 steps, the largest gap
  between the 50-step mean losses of 8-bit and 32-bit AdamW was, with microbatches of 4 x 8
  tokens, 29 % storing v and 0.25 % storing sqrt(v) (LAMB: 9 % and 0.9 %); with 4 x 16 tokens
  0.81 % and 0.20 % (LAMB: 0.55 % and 0.34 %).
- **Offload** (``offload=True``): the states live in host memory whatever the training device,
  and each parameter's update runs there (``core.optim.offload``).

Peers average optimizer statistics and must agree on their meaning, so ``dense_state`` and
``load_dense`` give and take float32 moments whatever the storage (averaging codes would be
meaningless), while the stored tensors themselves travel in snapshots and checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, overload

import torch
from torch.optim.optimizer import ParamsT

from core.optim.offload import Offload
from core.optim.quant8 import CodeBook, blocks_for, dequantise, quantise_into
from core.worker.errors import TrainingError

STATE_FORMATS = ("32bit", "8bit")
MIN_QUANTISED = 4096
"""Parameters with fewer elements keep 32-bit moments under ``states="8bit"``: biases and norms,
whose blocks would be mostly absmax overhead, and whose moments matter most per element."""
MOMENTS = (("exp_avg", True), ("exp_avg_sq", False))
"""Each moment's name and whether its 8-bit map is signed (sqrt(v) >= 0 gets the unsigned map)."""
DENSE_KEYS = ("exp_avg", "exp_avg_sq", "step")
"""A parameter's statistics as averaging sees them (sorted, as the 32-bit layout stores them)."""
_QUANTISED_KEYS = {f"{name}_{part}" for name, _ in MOMENTS for part in ("codes", "absmax")}


def check_adam_settings(
    lr: float, betas: tuple[float, float], eps: float, weight_decay: float
) -> None:
    """The settings every Adam-family optimizer here takes; ValueError naming the bad one."""
    if not lr >= 0.0:
        raise ValueError(f"learning rate must be 0 or more, not {lr}")
    if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
        raise ValueError(f"betas must each lie in [0, 1), not {betas}")
    if not eps >= 0.0:
        raise ValueError(f"eps must be 0 or more, not {eps}")
    if not weight_decay >= 0.0:
        raise ValueError(f"weight_decay must be 0 or more, not {weight_decay}")


def is_absmax(key: str) -> bool:
    """Whether a state key holds 8-bit absmax values (finite and non-negative when valid)."""
    return key.endswith("_absmax") and key in _QUANTISED_KEYS


class MomentOptimizer(torch.optim.Optimizer):
    """An Adam-family optimizer whose moments may be 8-bit and may live on the host.

    Subclasses implement ``_apply(weight, exp_avg, exp_avg_sq, step, group)``: change ``weight``
    in place from the already updated moments. Dense gradients only.
    """

    def __init__(
        self,
        params: ParamsT,
        defaults: dict[str, Any],
        *,
        states: str = "32bit",
        offload: bool = False,
        min_quantised: int = MIN_QUANTISED,
    ) -> None:
        if states not in STATE_FORMATS:
            raise ValueError(f"states must be one of {', '.join(STATE_FORMATS)}, not {states!r}")
        if min_quantised < 1:
            raise ValueError(f"min_quantised must be 1 or more, not {min_quantised}")
        super().__init__(params, defaults)
        self.states = states
        self.offload = offload
        self.min_quantised = min_quantised
        self.codebook = CodeBook()
        self.offloader = Offload()

    def _apply(
        self,
        weight: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        step: float,
        group: dict[str, Any],
    ) -> None:
        raise NotImplementedError

    # ---- stepping ---------------------------------------------------------------------------------

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Apply one update to every parameter that has a gradient.

        ``closure``, if given, re-evaluates the model (with gradients enabled) and returns the
        loss, which is returned in turn.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        work = [(p, g) for g in self.param_groups for p in g["params"] if p.grad is not None]
        for p, _ in work:
            self._check_dense(p.grad)
        with torch.no_grad():
            if self.offload:
                self.offloader.run(work, self._update)
            else:
                for p, group in work:
                    self._update(p, p, p.grad, group)
        return loss

    def step_with(self, grads: Sequence[torch.Tensor]) -> None:
        """One update of every parameter with ``grads`` (in parameter order, any device) instead
        of ``.grad``: an offloaded optimizer fed from host accumulators moves only the weights."""
        work = [(p, g) for g in self.param_groups for p in g["params"]]
        if len(grads) != len(work):
            raise ValueError(f"{len(grads)} gradients for {len(work)} parameters")
        for grad in grads:
            self._check_dense(grad)
        with torch.no_grad():
            if self.offload:
                host = [g if g.device.type == "cpu" else g.to("cpu") for g in grads]
                self.offloader.run(work, self._update, host)
            else:
                for (p, group), grad in zip(work, grads, strict=True):
                    self._update(p, p, grad.to(device=p.device, dtype=p.dtype), group)

    def _check_dense(self, grad: torch.Tensor | None) -> None:
        if grad is not None and grad.is_sparse:
            raise TrainingError(
                f"{type(self).__name__} does not support sparse gradients: it needs whole "
                "tensors (LAMB the norm of the whole update); use dense embeddings (sparse=False)"
            )

    def _update(
        self, param: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor, group: dict[str, Any]
    ) -> None:
        """One parameter's update; ``weight`` is the parameter itself or its host copy."""
        state = self.state[param]
        if not state:
            self._init_state(param, state)
        self._place(state, weight.device)
        beta1, beta2 = (float(b) for b in group["betas"])
        step_count: torch.Tensor = state["step"]
        step_count.add_(1)
        quantised = "exp_avg_codes" in state
        if quantised:
            exp_avg, exp_avg_sq = (
                self._dequantise(state, name, param.shape) for name, _ in MOMENTS
            )
        else:
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        self._apply(weight, exp_avg, exp_avg_sq, float(step_count), group)
        if quantised:
            self._quantise(state, "exp_avg", exp_avg)
            self._quantise(state, "exp_avg_sq", exp_avg_sq)

    # ---- state layout -----------------------------------------------------------------------------

    def quantises(self, param: torch.Tensor) -> bool:
        """Whether ``param``'s moments are kept in 8 bits."""
        return self.states == "8bit" and param.numel() >= self.min_quantised

    def home(self, param: torch.Tensor) -> torch.device:
        """Where ``param``'s statistics live."""
        return torch.device("cpu") if self.offload else param.device

    def ensure_state(self, params: Iterable[torch.Tensor]) -> None:
        """Create fresh (zero) statistics for each of ``params`` that has none yet."""
        for p in params:
            state = self.state[p]
            if not state:
                self._init_state(p, state)

    def _init_state(self, param: torch.Tensor, state: dict[str, Any]) -> None:
        # a float tensor on the CPU, like torch's Adam: peers average and share optimizer state
        # tensor by tensor, and the count must travel with the moments
        state["step"] = torch.zeros((), dtype=torch.float32)
        place = self.home(param)
        if self.quantises(param):
            for name, signed in MOMENTS:
                zero = self.codebook.zero_code(signed)
                state[f"{name}_absmax"] = torch.zeros(
                    blocks_for(param.numel()), dtype=torch.float32, device=place
                )
                state[f"{name}_codes"] = torch.full(
                    (param.numel(),), zero, dtype=torch.uint8, device=place
                )
        else:
            for name, _ in MOMENTS:
                state[name] = torch.zeros_like(
                    param, memory_format=torch.preserve_format, device=place
                )

    def _place(self, state: dict[str, Any], device: torch.device) -> None:
        """Statistics where the update runs (a checkpoint loaded before the model moved)."""
        for key, value in state.items():
            if key != "step" and isinstance(value, torch.Tensor) and value.device != device:
                state[key] = value.to(device)

    def _dequantise(self, state: dict[str, Any], name: str, shape: torch.Size) -> torch.Tensor:
        return self._decode(name, state[f"{name}_codes"], state[f"{name}_absmax"], shape)

    def _decode(
        self, name: str, codes: torch.Tensor, absmax: torch.Tensor, shape: torch.Size
    ) -> torch.Tensor:
        """Moment ``name`` as float32 from its codes (v is stored as its square root)."""
        signed = name == "exp_avg"
        value = dequantise(codes, absmax, shape, signed=signed, book=self.codebook)
        return value if signed else value.square_()

    def _quantise(self, state: dict[str, Any], name: str, value: torch.Tensor) -> None:
        signed = name == "exp_avg"
        stored = value if signed else value.float().clamp(min=0.0).sqrt_()
        codes, absmax = state[f"{name}_codes"], state[f"{name}_absmax"]
        quantise_into(stored, codes, absmax, signed=signed, book=self.codebook)

    # ---- what peers average -------------------------------------------------------------------

    def dense_state(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        """``param``'s statistics as float values, keyed as the 32-bit layout keys them: the stored
        tensors themselves when 32-bit, fresh dequantised float32 tensors when 8-bit."""
        state = self.state[param]
        if not state:
            self._init_state(param, state)
        if "exp_avg_codes" not in state:
            return {
                "exp_avg": state["exp_avg"],
                "exp_avg_sq": state["exp_avg_sq"],
                "step": state["step"],
            }
        dense = {name: self._dequantise(state, name, param.shape) for name, _ in MOMENTS}
        return {**dense, "step": state["step"]}

    def load_dense(self, param: torch.Tensor, values: Mapping[str, torch.Tensor]) -> None:
        """Take float statistics for ``param`` (as ``dense_state`` gives them), re-quantising them
        when 8-bit. Raises ValueError if a key is missing or a shape differs."""
        state = self.state[param]
        if not state:
            self._init_state(param, state)
        for key in DENSE_KEYS:
            if key not in values:
                raise ValueError(f"the optimizer statistics lack {key!r}")
            expected = () if key == "step" else tuple(param.shape)
            if tuple(values[key].shape) != expected:
                raise ValueError(f"{key} has shape {tuple(values[key].shape)}, not {expected}")
        with torch.no_grad():
            state["step"].copy_(values["step"])
            for name, _ in MOMENTS:
                if name in state:
                    state[name].copy_(values[name].to(state[name].device, state[name].dtype))
                else:
                    codes = state[f"{name}_codes"]
                    self._quantise(state, name, values[name].to(codes.device))

    # ---- checkpoints and moves ----------------------------------------------------------------

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loading, then each parameter's statistics in this optimizer's layout.

        torch casts every state tensor to its parameter's dtype, which would turn 8-bit codes into
        floats and round absmax values to the parameter's precision: those are taken again from
        ``state_dict`` as they were. A checkpoint written with the other ``states`` setting is
        converted (quantised or dequantised); one whose tensors do not fit raises ValueError.
        """
        saved: Mapping[Any, Mapping[str, Any]] = state_dict.get("state", {})
        super().load_state_dict(state_dict)
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for saved_id, param in zip(ids, params, strict=True):
            if saved_id not in saved:
                continue
            state = self.state[param]
            for key in _QUANTISED_KEYS & set(saved[saved_id]):
                value = saved[saved_id][key]
                if not isinstance(value, torch.Tensor):
                    raise ValueError(f"optimizer state {key!r} is not a tensor")
                state[key] = value.detach().to(self.home(param), copy=True)
            self._conform(param, state)

    def _conform(self, param: torch.Tensor, state: dict[str, Any]) -> None:
        """Check a loaded state against ``param`` and bring it into this optimizer's layout."""
        step = state.get("step")
        if not isinstance(step, torch.Tensor) or step.numel() != 1:
            raise ValueError("the optimizer state has no step count")
        loaded = {name: _loaded_moment(state, name, param) for name, _ in MOMENTS}
        state.clear()
        state["step"] = step.detach().to("cpu", torch.float32, copy=True).reshape(())
        place = self.home(param)
        quantised = self.quantises(param)
        if quantised:
            self._init_state(param, state)
            state["step"].copy_(step.reshape(()))
        for name, _ in MOMENTS:
            item = loaded[name]
            if isinstance(item, tuple):
                codes, absmax = item[0].to(place), item[1].to(place)
                if quantised:
                    state[f"{name}_codes"], state[f"{name}_absmax"] = codes, absmax
                else:
                    state[name] = self._decode(name, codes, absmax, param.shape).to(param.dtype)
            elif quantised:
                self._quantise(state, name, item.to(place, torch.float32))
            else:
                state[name] = item.to(device=place, dtype=param.dtype)

    def move_states(self, device: torch.device) -> None:
        """Statistics to ``device``, or kept on the host when offloaded (a pause gives the GPU's
        memory back, a resume brings it on again). Moving to the CPU also frees the 8-bit tables
        and the offload's staging buffers, so nothing of this optimizer stays on the device."""
        target = torch.device("cpu") if self.offload else torch.device(device)
        for state in self.state.values():
            self._place(state, target)
        if target.type == "cpu":
            self.codebook.clear()
            self.offloader.release()


def _loaded_moment(
    state: Mapping[str, Any], name: str, param: torch.Tensor
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Moment ``name`` of a loaded state, checked against ``param``: a dense tensor, or its 8-bit
    (codes, absmax). Raises ValueError for anything that does not fit."""
    n = param.numel()
    if f"{name}_codes" in state:
        codes, absmax = state[f"{name}_codes"], state.get(f"{name}_absmax")
        if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8 or codes.numel() != n:
            raise ValueError(f"{name}_codes must be {n} uint8 values for this parameter")
        if not isinstance(absmax, torch.Tensor) or absmax.numel() != blocks_for(n):
            raise ValueError(f"{name}_absmax must hold {blocks_for(n)} values for this parameter")
        absmax = absmax.float()
        if not bool(torch.isfinite(absmax).all()) or bool((absmax < 0).any()):
            raise ValueError(f"{name}_absmax must be finite and non-negative")
        return codes.reshape(-1), absmax.reshape(-1)
    value = state.get(name)
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"the optimizer state has keys {sorted(state)}: {name!r} is missing")
    if tuple(value.shape) != tuple(param.shape):
        raise ValueError(f"{name} has shape {tuple(value.shape)}, not {tuple(param.shape)}")
    return value
