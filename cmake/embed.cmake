# Writes a C++ header holding a text file as a raw string literal, so the app carries files kept
# in the tree (the flagship configuration, the status page) without reading them at run time.
# cmake -DIN=file -DOUT=header -DNAME=identifier -P embed.cmake
file(READ "${IN}" content)
string(FIND "${content}" ")diloco_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter")
endif()
get_filename_component(source_name "${IN}" NAME)
file(WRITE "${OUT}.tmp" "// Generated from ${source_name} by cmake/embed.cmake; edit the source file.\n#pragma once\n"
  "inline constexpr const char* ${NAME} = R\"diloco_embed(${content})diloco_embed\";\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
