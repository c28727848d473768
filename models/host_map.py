"""``Dataset.map`` for host-side preprocessing (tokenizers) whose function is instantiated
once per iterator without Grappler.

Why (benchmarks/tokenization.py's fixed-cost table): ``tf.data`` instantiates a
map function again for every iterator, i.e. every epoch of a training loop, and by default
it does so as a *multi-device* function: placement, the whole Grappler meta-optimiser
(remapper, arithmetic, dependency, TFG passes ... twice), partitioning and a conversion back
to a function, before the kernels are built. For a tokenizer's few hundred string ops that
is 0.10 s of a 0.15 s pass over the 7,430-line demo corpus, paid on every pass.

tf.data's ``CapturedFunction`` instantiates a function on its single (host) device through
the plain function runtime (the graph is expanded, the classic graph optimiser folds and
inlines, the kernels are built; no Grappler, placer or partitioner) when the function
carries TensorFlow's ``experimental_ints_on_device`` attribute; on the host device that
attribute changes nothing else (int32 tensors already live in host memory). tf.data's
public ``map`` has no way to set a function attribute, so :class:`HostMapDataset` is
``Dataset.map(fn, num_parallel_calls)`` (the same ``ParallelMapDatasetV2`` op, the same
traced function) with the attribute set: a mechanism tf.data lacks, built on its
``StructuredFunctionWrapper``. :func:`host_map` returns the function's outputs packed in one
``tf.experimental.Optional`` and unpacks them with a one-op ``Dataset.map`` (a few
milliseconds to instantiate), so the elements are ``Dataset.map``'s.

Use it only for functions that run entirely on the host (string ops, lookups, ragged
packing): a function that captures a tensor or resource held on another device falls back
to ``Dataset.map``.
"""

from __future__ import annotations

from lmfactory.models.backend import tf


try:  # tf.data internals (TensorFlow 2.16, pinned); without them host_map is Dataset.map
    from tensorflow.python.data.ops import dataset_ops, structured_function
    from tensorflow.python.ops import gen_dataset_ops
    _UnaryDataset = dataset_ops.UnaryDataset
except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow version
    structured_function = gen_dataset_ops = None
    _UnaryDataset = object

# TensorFlow's FunctionLibraryDefinition::kIntsOnDeviceAttr: a tf.data function carrying it
# is instantiated on the iterator's device alone (CapturedFunction: use_multi_device_function
# is false).
SINGLE_DEVICE_ATTRIBUTE = "experimental_ints_on_device"


class HostMapDataset(_UnaryDataset):
    """``input_dataset.map(map_func, num_parallel_calls, deterministic)`` whose function is
    instantiated on the host device alone (see the module docstring)."""

    def __init__(self, input_dataset, map_func, num_parallel_calls=tf.data.AUTOTUNE,
                 deterministic=None, name=None):
        self._input_dataset = input_dataset
        self._map_func = structured_function.StructuredFunctionWrapper(
            map_func, self._transformation_name(), dataset=input_dataset,
            defun_kwargs={SINGLE_DEVICE_ATTRIBUTE: True})
        self._deterministic = ("default" if deterministic is None
                               else "true" if deterministic else "false")
        self._num_parallel_calls = tf.convert_to_tensor(num_parallel_calls, tf.int64,
                                                        name="num_parallel_calls")
        self._name = name
        variant = gen_dataset_ops.parallel_map_dataset_v2(
            input_dataset._variant_tensor,  # noqa: SLF001 (tf.data's own dataset wiring)
            self._map_func.function.captured_inputs,
            f=self._map_func.function,
            num_parallel_calls=self._num_parallel_calls,
            deterministic=self._deterministic,
            use_inter_op_parallelism=True,
            preserve_cardinality=True,
            **self._common_args)
        super().__init__(input_dataset, variant)

    def _functions(self):
        return [self._map_func]

    @property
    def element_spec(self):
        return self._map_func.output_structure

    def _transformation_name(self):
        return "host_map()"


def on_host(captured_inputs) -> bool:
    """Whether every captured tensor / resource handle lives on a CPU device."""
    return all(not getattr(tensor, "device", "") or "CPU" in tensor.device.upper()
               for tensor in captured_inputs)


def host_map(dataset: tf.data.Dataset, map_func, num_parallel_calls=tf.data.AUTOTUNE,
             deterministic=None, name=None) -> tf.data.Dataset:
    """``dataset.map(map_func, num_parallel_calls, deterministic)`` for host-side work,
    without tf.data's per-iterator multi-device instantiation (:class:`HostMapDataset`);
    ``Dataset.map`` itself when the function captures something held off the host.

    The function's outputs travel as one ``tf.experimental.Optional`` (a single variant:
    tf.data's graph rewrite refuses a function carrying the attribute with several plain
    tensor outputs), unpacked by a one-op ``Dataset.map`` after it."""

    if structured_function is None:
        return dataset.map(map_func, num_parallel_calls=num_parallel_calls,
                           deterministic=deterministic, name=name)

    def packed(*args):
        return tf.experimental.Optional.from_value(map_func(*args))

    mapped = HostMapDataset(dataset, packed, num_parallel_calls, deterministic, name)
    if not on_host(mapped._map_func.function.captured_inputs):  # noqa: SLF001
        return dataset.map(map_func, num_parallel_calls=num_parallel_calls,
                           deterministic=deterministic, name=name)
    return mapped.map(lambda optional: optional.get_value())


__all__ = ["HostMapDataset", "SINGLE_DEVICE_ATTRIBUTE", "host_map", "on_host"]
