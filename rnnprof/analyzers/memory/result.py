"""What ``analyze_memory`` finds: per device, its peak and what was live then, its memory at each step's end, its
growth per step; across devices, imbalance. Definitions: docs/commands/memory.md."""

from __future__ import annotations

from dataclasses import dataclass

# PyTorch memory profiler's categories (torch.profiler._memory_profiler.Category), as rnnprof tells them from a
# trace, and what it cannot tell.
PARAMETER = "parameter"
OPTIMIZER_STATE = "optimizer_state"
INPUT = "input"
TEMPORARY = "temporary"
ACTIVATION = "activation"
GRADIENT = "gradient"
AUTOGRAD_DETAIL = "autograd_detail"
UNKNOWN = "unknown"  # allocated in the window where no phase tells what it is
BEFORE_WINDOW = "before_window"  # allocated before the trace's window began: parameters, state, inputs, ...
PER_STEP_WINDOWS = "TensorFlow records each step's allocations apart; growth across steps is not told"
CATEGORIES = (PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION, GRADIENT, AUTOGRAD_DETAIL, UNKNOWN,
              BEFORE_WINDOW)


@dataclass(frozen=True)
class Share:
    """Bytes of one category or operator."""

    name: str
    bytes: int


@dataclass(frozen=True)
class Peak:
    """A device's peak of allocated memory: when, the operator running, what was live."""

    allocated: int  # bytes
    reserved: int | None  # the allocator's reserved bytes at that moment (None: not reported)
    ts_us: float  # on the table's clock
    step: int  # -1: in no step
    operator: str  # the outermost operator running on the allocating thread ("" : none)
    by_category: tuple[Share, ...]  # every category of CATEGORIES with bytes, in that order; sums to allocated
    by_operator: tuple[Share, ...]  # the live bytes by the operator that allocated them, largest first
    fragmentation: int | None = None  # reserved but not allocated at the peak (None where reserved is not reported)


@dataclass(frozen=True)
class Growth:
    """Allocated memory at the end of each step, and its growth per step against the steps' own jitter."""

    step_end: tuple[tuple[int, int], ...]  # (step, allocated bytes after the step's last record, leaving out the
    # device's left_out_sizes)
    per_step: int  # median of the step-to-step differences (bytes/step)
    jitter: int  # median absolute deviation of those differences
    leak: bool  # growth beyond the jitter (and above MIN_GROWTH_SHARE of the peak), over enough steps
    reason: str = ""  # why no verdict: too few steps


@dataclass(frozen=True)
class TimelinePoint:
    """Allocated bytes at one moment, by category (``bytes``: one figure per CATEGORIES entry)."""

    ts_us: float
    bytes: tuple[int, ...]


@dataclass(frozen=True)
class Unsharded:
    """What FSDP2 had gathered for one module and not yet freed at a device's peak, in bytes."""

    module: str  # its name as FSDP's ranges give it ("(root)": the root module)
    parameters: int  # its parameters' unsharded storage (allocated in FSDP::all_gather_copy_out)
    buffers: int  # the all-gather's flat input and output (allocated in FSDP::all_gather)


@dataclass(frozen=True)
class DeviceMemory:
    device: str  # the device's label (``rank1/cpu:0``)
    worker: str
    records: int  # allocations and frees read
    baseline: int  # bytes allocated before the first record (the allocator's Total Allocated, else 0)
    baseline_source: str  # where the baseline came from
    peak: Peak
    peak_reserved: int | None  # the allocator's largest reserved bytes
    growth: Growth
    mismatches: int  # records whose Total Allocated disagrees with the running sum
    window_start: int | None = None  # memory in use when the capture's window started (the run's manifest)
    window_start_source: str = ""  # cuda_allocator, or process_rss (more than tensors: not in the series)
    allocator_max: int | None = None  # the CUDA allocator's max_memory_allocated over the process (the manifest)
    timeline: tuple[TimelinePoint, ...] = ()  # at most TIMELINE_POINTS moments, the peak of each run of records
    step_peaks: tuple[tuple[int, int], ...] = ()  # (step, its largest allocated bytes, leaving out left_out_sizes)
    step_allocations: tuple[tuple[int, int], ...] = ()  # (step, the bytes of its allocations, added up)
    missing_frees: int = 0  # allocations whose free the records miss: their address was allocated again (torch's
    # profiler records no free made on a thread without its state: FSDP2's collective buffers on gloo)
    missing_step_bytes: int = 0  # the most bytes allocated in one step whose frees the records miss: a leak or an
    # imbalance must exceed it
    missing_operators: tuple[Share, ...] = ()  # the bytes whose frees the records miss, by the operator running when
    # they were allocated
    left_out_sizes: tuple[int, ...] = ()  # block sizes whose frees the records miss on a device of the input: every
    # block of these sizes is left out of the growth and the step peaks
    unsharded: tuple[Unsharded, ...] = ()  # FSDP2's gathered parameters and buffers live at the peak, by module


@dataclass(frozen=True)
class Imbalance:
    """A device whose peak exceeds the median of the others of its kind."""

    device: str
    peak: int
    others_median: int
    excess: int  # bytes: the median over steps of the step's peak less the others' (the peaks' without steps)
    threshold: int  # the excess that counts: a share of the others' median peak
    operators: tuple[Share, ...]  # operators whose live bytes at the peak exceed the others' median most
    other_replicas: tuple[Share, ...] = ()  # live bytes of operators of another replica's scope (tower_k, k not
    # the device's index): a replica's work pinned here
    allocates_more: int = 0  # bytes: the median over shared steps of what the device allocates in a step, less
    # the others' median (what was placed there, whatever the order the operators ran in)
    from_step: int = -1  # the step it starts at, where it starts after the devices' first shared step (-1: from
    # the first); the excess and allocates_more are then those of the steps from it to last_step
    taken: int = 0  # bytes: with from_step, the device's excess from that step on less its excess before it (what it
    # took at that step and kept)
    last_step: int = -1  # the last step the devices share (-1: whole peaks compared, no steps)


@dataclass(frozen=True)
class StagePeak:
    """A pipeline rank's device: its peak, and the micro-batches whose activations its stage holds at most."""

    device: str
    position: int  # its rank's place in the pipeline
    peak: int
    activation: int  # of the peak, activations' bytes
    in_flight: int | None  # micro-batches in flight on its stage by the schedule (None: the schedule does not say)


@dataclass(frozen=True)
class PipelineMemory:
    """The peaks of a pipeline's stages, compared as the schedule explains them, not as replicas: ranks of different
    stages hold different layers, and 1F1B has its first stage hold the activations of more micro-batches."""

    schedule: str  # names.PIPELINE_SCHEDULES, "" not known
    ranks: int  # p
    micro_batches: int  # m
    peaks: tuple[StagePeak, ...]  # by position, then device
    explained: bool  # the highest peak is on a stage the schedule has hold the most micro-batches (more than another)


@dataclass(frozen=True)
class MemoryReport:
    source: str
    devices: tuple[DeviceMemory, ...]
    imbalances: tuple[Imbalance, ...]
    unusable: int  # memory events of the source left out (a field missing or not a number)
    steps: str = ""  # the step selection, described
    pipeline: PipelineMemory | None = None  # the stages' peaks, where the devices are a pipeline's ranks
