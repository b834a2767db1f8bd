# Runs `tpserve generate --trace-file` and checks the file: Chrome trace JSON, rank tracks.
execute_process(COMMAND ${TPSERVE} generate --model ${MODEL} --prompt "Hi" --max-tokens 3 --tp 2
                        --trace-file ${OUT}
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generate failed with ${rc}")
endif()
file(READ ${OUT} trace)
string(JSON events GET "${trace}" traceEvents)
string(JSON count LENGTH "${events}")
if(count LESS 20)
  message(FATAL_ERROR "only ${count} trace events")
endif()
string(FIND "${trace}" "\"name\":\"allreduce.mlp\"" has_allreduce)
string(FIND "${trace}" "\"rank 1\"" has_rank1)
if(has_allreduce EQUAL -1 OR has_rank1 EQUAL -1)
  message(FATAL_ERROR "trace lacks allreduce events or a rank 1 track")
endif()
message(STATUS "trace ok: ${count} events")
