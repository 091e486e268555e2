"""BLS, the ways Triton's examples use it. MODE 0: exec() on py_add_sub;
1: async execute awaiting two async_exec() calls, OUTPUT0 the first's
OUTPUT0 and OUTPUT1 the second's (inputs swapped); 2: exec(decoupled=True)
iterated; 3: a model that does not exist, its error returned; 4: the
built-in `simple` model (INT32 [1,16]), its OUTPUT0 sliced; 5: the error
a BLS call from initialize got (Triton refuses it), as the response's
error."""
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


def add_sub_request(in0, in1, outputs=("OUTPUT0", "OUTPUT1"), model="py_add_sub"):
    return pb_utils.InferenceRequest(
        model_name=model, requested_output_names=list(outputs),
        inputs=[pb_utils.Tensor("INPUT0", in0), pb_utils.Tensor("INPUT1", in1)])


def passthrough(response):
    if response.has_error():
        return pb_utils.InferenceResponse(error=response.error())
    return pb_utils.InferenceResponse([
        pb_utils.get_output_tensor_by_name(response, "OUTPUT0"),
        pb_utils.get_output_tensor_by_name(response, "OUTPUT1")])


class TritonPythonModel:
    def initialize(self, args):
        zeros = np.zeros(4, np.float32)
        try:
            add_sub_request(zeros, zeros).exec()
            self.init_bls_error = "a BLS call from initialize was served"
        except pb_utils.TritonModelException as e:
            self.init_bls_error = str(e)

    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if mode == 5:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(self.init_bls_error)))
            elif mode == 0:
                responses.append(passthrough(add_sub_request(in0, in1).exec()))
            elif mode == 1:
                first, second = await asyncio.gather(
                    add_sub_request(in0, in1).async_exec(),
                    add_sub_request(in1, in0).async_exec())
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.get_output_tensor_by_name(first, "OUTPUT0"),
                    pb_utils.Tensor("OUTPUT1", pb_utils.get_output_tensor_by_name(
                        second, "OUTPUT1").as_numpy())]))
            elif mode == 2:
                got = list(add_sub_request(in0, in1).exec(decoupled=True))
                responses.append(passthrough(got[-1]))
            elif mode == 3:
                responses.append(passthrough(add_sub_request(in0, in1, model="no_such_model").exec()))
            else:
                a = np.arange(16, dtype=np.int32).reshape(1, 16)
                b = np.ones((1, 16), dtype=np.int32)
                out = add_sub_request(a, b, model="simple").exec()
                if out.has_error():
                    responses.append(pb_utils.InferenceResponse(error=out.error()))
                    continue
                sums = pb_utils.get_output_tensor_by_name(out, "OUTPUT0").as_numpy()
                diffs = pb_utils.get_output_tensor_by_name(out, "OUTPUT1").as_numpy()
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUTPUT0", sums[0, :4].astype(np.float32)),
                    pb_utils.Tensor("OUTPUT1", diffs[0, :4].astype(np.float32))]))
        return responses
