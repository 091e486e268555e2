# Unit tests registered by hand (included by tests/unit/CMakeLists.txt).
#
# Device conformance is one source built twice: the CPU device (no label,
# always runs) and every CUDA GPU (label `gpu`; without a GPU, or without
# CUDA support, its cases are listed and report SKIPPED).
osprey_add_unit_test(test_device_conformance
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_device_conformance.cc)
osprey_add_unit_test(test_device_conformance_cuda
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_device_conformance.cc
  LABELS gpu)
target_compile_definitions(test_device_conformance_cuda PRIVATE
  OSPREY_TEST_CUDA_ONLY=1)
if(OSPREY_HAVE_CUDA)
  target_link_libraries(test_device_conformance PRIVATE osprey_cuda)
  target_link_libraries(test_device_conformance_cuda PRIVATE osprey_cuda)
endif()
list(APPEND OSPREY_SPECIAL_UNIT_TESTS
  test_device_conformance test_device_conformance_cuda)

# The same cases on the CUDA device's host code over the fake CUDA runtime
# of tests/fake_cuda (two fake GPUs): pools, copies, streams, events and the
# cuBLAS calls run in every build; only the kernels are not the real ones.
if(OSPREY_HAVE_CUDA)
  osprey_add_unit_test(test_device_conformance_fakecuda
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_device_conformance.cc
    $<TARGET_OBJECTS:osprey_cuda_fake>)
  target_compile_definitions(test_device_conformance_fakecuda PRIVATE
    OSPREY_TEST_CUDA_ONLY=1 OSPREY_TEST_FAKE_CUDA=1)
  target_include_directories(test_device_conformance_fakecuda PRIVATE
    ${CUDAToolkit_INCLUDE_DIRS})
  target_link_options(test_device_conformance_fakecuda PRIVATE -Wl,--as-needed)
endif()
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_device_conformance_fakecuda)

# The CUDA device's tensor ops (test_cuda_ops_*.cc, over the harness of
# device_test_harness.h: each op on the CUDA device against the CPU
# device). Each file is built twice: over the fake CUDA runtime, which runs
# the kernels' own code on the host (always runs when CUDA is built), and
# as <name>_gpu over the real runtime (label gpu, SKIPPED without a GPU).
file(GLOB OSPREY_CUDA_OP_TESTS CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_ops_*.cc)
foreach(src ${OSPREY_CUDA_OP_TESTS})
  get_filename_component(name ${src} NAME_WE)
  list(APPEND OSPREY_SPECIAL_UNIT_TESTS ${name})
  if(OSPREY_HAVE_CUDA)
    osprey_add_unit_test(${name} SOURCES ${src} $<TARGET_OBJECTS:osprey_cuda_fake>)
    target_compile_definitions(${name} PRIVATE
      OSPREY_TEST_CUDA_ONLY=1 OSPREY_TEST_FAKE_CUDA=1)
    target_include_directories(${name} PRIVATE ${CUDAToolkit_INCLUDE_DIRS}
      ${PROJECT_SOURCE_DIR}/tests/fake_cuda)
    target_link_options(${name} PRIVATE -Wl,--as-needed)
    osprey_add_unit_test(${name}_gpu SOURCES ${src} LABELS gpu)
    target_compile_definitions(${name}_gpu PRIVATE OSPREY_TEST_CUDA_ONLY=1)
    target_link_libraries(${name}_gpu PRIVATE osprey_cuda)
  endif()
endforeach()

# The CUDA pools' sub-allocator is plain C and is tested without a GPU;
# it only exists when the CUDA device is built.
if(OSPREY_HAVE_CUDA)
  osprey_add_unit_test(test_range_pool
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_range_pool.cc)
  target_link_libraries(test_range_pool PRIVATE osprey_cuda)
endif()
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_range_pool)

# The load API's override codecs: base64 (server/json) and the ModelConfig
# JSON rewrite (server/kserve).
osprey_add_unit_test(test_load_override_codecs
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_load_override_codecs.cc)
target_link_libraries(test_load_override_codecs PRIVATE osprey_kserve osprey_json)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_load_override_codecs)

# The KServe inference codec (server/kserve) on a real server, no HTTP.
osprey_add_unit_test(test_kserve_codec
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kserve_codec.cc)
target_link_libraries(test_kserve_codec PRIVATE osprey_kserve osprey_json)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_kserve_codec)

# The HTTP transport, spoken to over loopback sockets with a fake surface.
osprey_add_unit_test(test_http_server
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_http_server.cc)
target_link_libraries(test_http_server PRIVATE osprey_http)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_http_server)

# The TF Serving model view (server/tfserving/tfs_model.c): declarations,
# and the status and metadata replies on a real server.
osprey_add_unit_test(test_tfs_model
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tfs_model.cc)
target_link_libraries(test_tfs_model PRIVATE osprey_tfserving osprey_json)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_tfs_model)

# The TF Serving REST codec (server/tfserving) and its JSON DOM, no HTTP.
osprey_add_unit_test(test_tfs_codec
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_tfs_codec.cc)
target_link_libraries(test_tfs_codec PRIVATE osprey_tfserving osprey_json)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_tfs_codec)

# The system shared memory registry (server/kserve) on real POSIX objects.
osprey_add_unit_test(test_kserve_shm
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kserve_shm.cc)
target_link_libraries(test_kserve_shm PRIVATE osprey_kserve osprey_json)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_kserve_shm)

# The JSON helpers the frontends share (server/json).
osprey_add_unit_test(test_json_util
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_json_util.cc)
target_link_libraries(test_json_util PRIVATE osprey_json)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_json_util)

# CUDA IPC between two processes on a real GPU (label gpu; SKIPPED without
# one): the path of Triton's CUDA shared memory through the CUDA device.
osprey_add_unit_test(test_cuda_ipc
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_ipc.cc LABELS gpu)
if(OSPREY_HAVE_CUDA)
  target_link_libraries(test_cuda_ipc PRIVATE osprey_cuda)
endif()
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_cuda_ipc)

# The queue surface's codecs without a server (server/http): query values,
# the WebSocket handshake key and session, and the protobuf replies.
osprey_add_unit_test(test_queue_codecs
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_queue_codecs.cc)
target_link_libraries(test_queue_codecs PRIVATE osprey_http osprey_json
  osprey_proto_queue)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_queue_codecs)

# The queue stores (server/queue): the contract every store passes
# (test_queue_conformance, one instance per store) and the embedded store's
# own crash-safety tests.
foreach(queue_test test_queue_conformance test_queue_embedded)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${queue_test}.cc)
    osprey_add_unit_test(${queue_test}
      SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/${queue_test}.cc
      ${CMAKE_CURRENT_SOURCE_DIR}/redis_test_server.cc
      TEST_PREFIX queue.)
    target_link_libraries(${queue_test} PRIVATE osprey_queue)
  endif()
endforeach()
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_queue_conformance test_queue_embedded)

# The gRPC inference codec (server/grpc, no gRPC transport): protobuf-c
# messages to requests and responses back to messages.
osprey_add_unit_test(test_grpc_convert
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_grpc_convert.cc)
target_link_libraries(test_grpc_convert PRIVATE osprey_grpc_codec osprey_kserve)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_grpc_convert)

# The Redis Streams queue store against a real redis-server started by the
# test on a free loopback port (tests/unit/redis_test_server.cc).
osprey_add_unit_test(test_queue_redis
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_queue_redis.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/redis_test_server.cc
  TEST_PREFIX queue.)
target_link_libraries(test_queue_redis PRIVATE osprey_queue)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_queue_redis)

# The ONNX runtime's elementwise ops (backends/onnx/onnx_ops_elementwise.c,
# onnx_ops_activation.c) on the CPU device, through their op tables.
osprey_add_unit_test(test_onnx_ops_elementwise
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_ops_elementwise.cc)
target_link_libraries(test_onnx_ops_elementwise PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_ops_elementwise)

# The ONNX runtime's shape and data-movement ops and the op helpers
# (backends/onnx/onnx_ops_shape.c, onnx_ops_movement.c, onnx_ops_util.c) on
# the CPU device, through onnx_op_find.
osprey_add_unit_test(test_onnx_ops_shape
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_ops_shape.cc)
target_link_libraries(test_onnx_ops_shape PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_ops_shape)

# The ONNX runtime's ops on STRING tensors (Where, Gather, Transpose,
# Constant, ConstantOfShape) on the CPU device, through onnx_op_find.
osprey_add_unit_test(test_onnx_strings_ops
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_strings_ops.cc)
target_link_libraries(test_onnx_strings_ops PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_strings_ops)

# The ONNX runtime's math ops (backends/onnx/onnx_ops_math.c, matmul,
# reduce, softmax) on the CPU device, through their op table.
osprey_add_unit_test(test_onnx_ops_math
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_ops_math.cc)
target_link_libraries(test_onnx_ops_math PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_ops_math)

# The ONNX runtime's nn ops (backends/onnx/onnx_ops_nn.c, onnx_ops_conv.c,
# onnx_ops_pool.c, onnx_ops_norm.c, onnx_ops_resize.c) on the CPU device,
# through their op table.
osprey_add_unit_test(test_onnx_ops_nn
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_ops_nn.cc)
target_link_libraries(test_onnx_ops_nn PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_ops_nn)

# The ONNX model loader (backends/onnx/onnx_loader.c, onnx_wire.c,
# onnx_tensor_proto.c) on Debian's libonnx-testdata (skipped without it)
# and on hostile files built by the test; ctest -R onnx finds it.
osprey_add_unit_test(test_onnx_loader
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_loader.cc
  TEST_PREFIX onnx_loader.)
target_link_libraries(test_onnx_loader PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_loader)

# Batch chunks of the ONNX runtime on the CPU device (backends/onnx/
# onnx_batch_chunks.c, onnx_session.c).
osprey_add_unit_test(test_onnx_batch_chunks
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_batch_chunks.cc
  TEST_PREFIX onnx_chunks.)
target_link_libraries(test_onnx_batch_chunks PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_batch_chunks)

# The ONNX runtime's recurrent ops (backends/onnx/onnx_ops_rnn.c: RNN, GRU,
# LSTM) on the CPU device, through their op table.
osprey_add_unit_test(test_onnx_ops_rnn
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_ops_rnn.cc)
target_link_libraries(test_onnx_ops_rnn PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_ops_rnn)

# The ONNX runtime's extra ops (backends/onnx/onnx_ops_extra.c, loss, quant,
# index: losses, quantization, scatter/gather variants, windows) on the CPU
# device, through their op table.
osprey_add_unit_test(test_onnx_ops_extra
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_ops_extra.cc)
target_link_libraries(test_onnx_ops_extra PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_ops_extra)

# s3:// repositories: URL forms, SigV4 (libcurl against a loopback socket),
# the XML readers and credentials; links the S3 library the core does not.
osprey_add_unit_test(test_s3 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_s3.cc)
target_link_libraries(test_s3 PRIVATE osprey_s3)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_s3)

# The fake CUDA runtime's kernel execution (tests/fake_cuda/
# fake_kernel_runtime.h), with test kernels compiled for the host.
if(OSPREY_HAVE_CUDA)
  osprey_add_unit_test(test_fake_kernel_runtime
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_fake_kernel_runtime.cc
    $<TARGET_OBJECTS:osprey_cuda_fake>)
  target_include_directories(test_fake_kernel_runtime PRIVATE
    ${CUDAToolkit_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/tests/fake_cuda)
  target_link_options(test_fake_kernel_runtime PRIVATE -Wl,--as-needed)
endif()
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_fake_kernel_runtime)

# The ONNX runtime's sessions on the CUDA device (weights once per device,
# CUDA graphs): over the fake CUDA runtime (every build) and as _gpu over
# the real one (label gpu, SKIPPED without a GPU).
if(OSPREY_HAVE_CUDA)
  osprey_add_unit_test(test_onnx_session_gpu
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_session_gpu.cc
    $<TARGET_OBJECTS:osprey_cuda_fake>)
  target_compile_definitions(test_onnx_session_gpu PRIVATE
    OSPREY_TEST_CUDA_ONLY=1 OSPREY_TEST_FAKE_CUDA=1)
  target_include_directories(test_onnx_session_gpu PRIVATE
    ${CUDAToolkit_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/tests/fake_cuda)
  target_link_options(test_onnx_session_gpu PRIVATE -Wl,--as-needed)
  target_link_libraries(test_onnx_session_gpu PRIVATE osprey_onnx)
  osprey_add_unit_test(test_onnx_session_gpu_gpu
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_session_gpu.cc LABELS gpu
    TEST_PREFIX gpu.)
  target_compile_definitions(test_onnx_session_gpu_gpu PRIVATE
    OSPREY_TEST_CUDA_ONLY=1)
  target_link_libraries(test_onnx_session_gpu_gpu PRIVATE osprey_cuda osprey_onnx)
endif()
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_session_gpu)

# STRING tensors in the ONNX runtime (backends/onnx/onnx_strings.c,
# onnx_ops_strings.c): the wire form, string pools, Cast's number text.
osprey_add_unit_test(test_onnx_strings
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_onnx_strings.cc)
target_link_libraries(test_onnx_strings PRIVATE osprey_onnx)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_onnx_strings)

osprey_add_unit_test(test_kserve_header_forward
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kserve_header_forward.cc)
target_link_libraries(test_kserve_header_forward PRIVATE osprey_kserve)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_kserve_header_forward)

# The redis response cache against a real redis-server started by the test
# on a free loopback port (tests/unit/redis_test_server.cc).
osprey_add_unit_test(test_cache_redis
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cache_redis.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/redis_test_server.cc)
target_link_libraries(test_cache_redis PRIVATE PkgConfig::HIREDIS)
list(APPEND OSPREY_SPECIAL_UNIT_TESTS test_cache_redis)
