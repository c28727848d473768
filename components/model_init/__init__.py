"""BackboneInitializer: a freshly initialised backbone as a Model artifact (a model trained
from scratch on its task, with no pretraining stage)."""
