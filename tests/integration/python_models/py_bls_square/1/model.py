"""Calls py_square with exec(decoupled=True) and answers how many responses
with outputs came and the sum of their OUT; an error response of py_square
becomes this model's error."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            bls = pb_utils.InferenceRequest(
                model_name="py_square", requested_output_names=["OUT"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")])
            count, total, error = 0, 0, None
            for response in bls.exec(decoupled=True):
                if response.has_error():
                    error = response.error()
                    break
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is None:  # the final flag, as an empty response
                    continue
                count += 1
                total += int(out.as_numpy()[0])
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("COUNT", np.array([count], np.int32)),
                pb_utils.Tensor("SUM", np.array([total], np.int32))]))
        return responses
