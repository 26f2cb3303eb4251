# Writes qvl's man page and shell completions into OUT by running the qvl binary
# QVL (its hidden --print-man and --completion options); apps/CMakeLists.txt runs
# it after every link of qvl:  cmake -DQVL=path/to/qvl -DOUT=folder -P qvl_docs.cmake
file(MAKE_DIRECTORY "${OUT}")

function(write_doc name)
  execute_process(COMMAND "${QVL}" ${ARGN} OUTPUT_FILE "${OUT}/${name}.new" RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${QVL} ${ARGN} failed (${status})")
  endif()
  file(RENAME "${OUT}/${name}.new" "${OUT}/${name}")
endfunction()

write_doc(qvl.1 --print-man)
write_doc(qvl.bash --completion bash)
write_doc(_qvl --completion zsh)
write_doc(qvl.fish --completion fish)
