"""Custom metrics as Triton's python backend has them
(test_python_metrics.py). Two instances share every family and series by
name and labels. OP picks what execute does with X: "count" increments
the counter, "gauge" sets the gauge, "observe" feeds the histogram,
"negative" increments the counter by X (refused when X < 0), "set_counter"
sets the counter (refused), "hist_value" reads the histogram (refused),
"temporary" makes and drops a metric of its own labels, "bad_family" makes
a family with another kind under the counter's name (refused)."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.requests = pb_utils.MetricFamily(
            name="py_metrics_requests_total", description="Requests seen",
            kind=pb_utils.MetricFamily.COUNTER)
        self.counter = self.requests.Metric(labels={"model": "py_metrics", "kind": "x"})
        self.level = pb_utils.MetricFamily(
            name="py_metrics_level", description="Last level set",
            kind=pb_utils.MetricFamily.GAUGE)
        self.gauge = self.level.Metric()
        self.sizes = pb_utils.MetricFamily(
            name="py_metrics_sizes", description="Sizes observed",
            kind=pb_utils.MetricFamily.HISTOGRAM)
        self.histogram = self.sizes.Metric(labels={"model": "py_metrics"},
                                           buckets=[1.0, 10.0, 100.0])

    def run(self, op, x):
        if op == "count":
            self.counter.increment(x)
            return self.counter.value()
        if op == "gauge":
            self.gauge.set(x)
            return self.gauge.value()
        if op == "observe":
            self.histogram.observe(x)
            return 0.0
        if op == "negative":
            self.counter.increment(x)
            return self.counter.value()
        if op == "set_counter":
            self.counter.set(x)
        if op == "hist_value":
            return self.histogram.value()
        if op == "temporary":
            metric = self.requests.Metric(labels={"model": "py_metrics", "kind": "temporary"})
            metric.increment(x)
            value = metric.value()
            del metric
            return value
        if op == "bad_family":
            pb_utils.MetricFamily(name="py_metrics_requests_total", description="",
                                  kind=pb_utils.MetricFamily.GAUGE)
        return 0.0

    def execute(self, requests):
        responses = []
        for request in requests:
            op = pb_utils.get_input_tensor_by_name(request, "OP").as_numpy()[0].decode()
            x = float(pb_utils.get_input_tensor_by_name(request, "X").as_numpy()[0])
            message = ""
            try:
                value = self.run(op, x)
            except pb_utils.TritonModelException as exc:
                value, message = -1.0, str(exc)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("VALUE", np.array([value], dtype=np.float64)),
                pb_utils.Tensor("MESSAGE", np.array([message.encode()], dtype=np.object_)),
            ]))
        return responses
