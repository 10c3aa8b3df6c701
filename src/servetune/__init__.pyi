"""Types of servetune's facade (``__init__.py`` loads each name when first used)."""

from servetune.api import (
    bench as bench,
)
from servetune.api import (
    compare as compare,
)
from servetune.api import (
    cost as cost,
)
from servetune.api import (
    diagnose as diagnose,
)
from servetune.api import (
    plan as plan,
)
from servetune.api import (
    quality as quality,
)
from servetune.api import (
    simulate as simulate,
)
from servetune.api import (
    sweep as sweep,
)
from servetune.api import (
    tune as tune,
)
from servetune.compare.model import CompareReport as CompareReport
from servetune.diagnose.model import Diagnosis as Diagnosis
from servetune.errors import ConfigError as ConfigError
from servetune.errors import ServetuneError as ServetuneError
from servetune.plan.request import PlanRequest as PlanRequest
from servetune.profiles import EngineProfile as EngineProfile
from servetune.results.cost_file import CostReport as CostReport
from servetune.results.plan_file import PlanResult as PlanResult
from servetune.results.quality_file import QualityReport as QualityReport
from servetune.results.schema import BenchConfig as BenchConfig
from servetune.results.schema import RunResult as RunResult
from servetune.results.schema import Slo as Slo
from servetune.results.sweep_schema import SweepConfig as SweepConfig
from servetune.results.sweep_schema import SweepResult as SweepResult
from servetune.results.tune_file import TuneResult as TuneResult
from servetune.results.tune_file import TuneSpec as TuneSpec
from servetune.sim.config import EngineConfig as EngineConfig

__version__: str
__all__: list[str]
