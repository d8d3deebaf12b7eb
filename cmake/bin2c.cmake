# Writes OUT: the file IN as a C array (unaligned: see cuda_kernels_blob.cpp) `dn_cuda_kernels_fatbin` (the toolkit's bin2c; cmake -P so that
# the output redirection works with every generator).
execute_process(COMMAND ${BIN2C} -c --name dn_cuda_kernels_fatbin ${IN} OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bin2c failed on ${IN}")
endif()
