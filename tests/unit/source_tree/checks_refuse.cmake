# The two source-tree checks refuse what they exist to refuse (cmake -P, ctest source_tree_checks_refuse):
# each case writes a small tree under WORK_DIR, runs the check on it and requires the exit status and
# the message that names the problem.
#   cmake -DSOURCE_DIR=<repository root> -DWORK_DIR=<scratch folder> -P checks_refuse.cmake
# Citations are spelled through variables (S, D) so that this file itself cites nothing.
cmake_minimum_required(VERSION 3.20)
set(S "§")
set(D "docs")
set(failures "")

# expect(<name> <0|1 for should fail> <regex of the message or ""> <command...>)
function(expect name should_fail pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(text "${out}${err}")
  string(REGEX REPLACE "[ \n]+" " " text "${text}")  # the messages wrap
  if(should_fail AND rc EQUAL 0)
    set_property(GLOBAL APPEND_STRING PROPERTY failures "${name}: the check passed, it should have failed\n")
  elseif(NOT should_fail AND NOT rc EQUAL 0)
    set_property(GLOBAL APPEND_STRING PROPERTY failures "${name}: the check failed, it should have passed: ${text}\n")
  elseif(pattern AND NOT text MATCHES "${pattern}")
    set_property(GLOBAL APPEND_STRING PROPERTY failures "${name}: the message lacks '${pattern}': ${text}\n")
  endif()
endfunction()

# ---- core/ modules ----
function(core_tree name modules)
  set(root "${WORK_DIR}/${name}")
  file(REMOVE_RECURSE "${root}")
  file(WRITE "${root}/modules.cmake" "${modules}")
  set(root "${root}" PARENT_SCOPE)
endfunction()

core_tree(layered "list(APPEND MLPT_CORE_MODULES a b)\nset(MLPT_CORE_DEPS_a)\nset(MLPT_CORE_DEPS_b a)\n")
file(WRITE "${root}/core/a/low.hpp" "#pragma once\n")
file(WRITE "${root}/core/b/high.cpp" "#include \"core/a/low.hpp\"\n")
expect(layered 0 "" ${CMAKE_COMMAND} -DCORE_DIR=${root}/core -DMODULES_FILE=${root}/modules.cmake
       -P ${SOURCE_DIR}/cmake/CheckCoreModules.cmake)

core_tree(undeclared "list(APPEND MLPT_CORE_MODULES a b)\nset(MLPT_CORE_DEPS_a)\nset(MLPT_CORE_DEPS_b)\n")
file(WRITE "${root}/core/a/low.hpp" "#pragma once\n")
file(WRITE "${root}/core/b/high.cpp" "// b\n\n#include \"core/a/low.hpp\"\n")
expect(undeclared 1 "core/b/high.cpp:3: includes core/a/low.hpp, but module b does not declare a"
       ${CMAKE_COMMAND} -DCORE_DIR=${root}/core -DMODULES_FILE=${root}/modules.cmake
       -P ${SOURCE_DIR}/cmake/CheckCoreModules.cmake)

core_tree(unused "list(APPEND MLPT_CORE_MODULES a b)\nset(MLPT_CORE_DEPS_a)\nset(MLPT_CORE_DEPS_b a)\n")
file(WRITE "${root}/core/a/low.hpp" "#pragma once\n")
file(WRITE "${root}/core/b/high.cpp" "int b;\n")
expect(unused 1 "module b declares a but nothing under core/b/ includes it"
       ${CMAKE_COMMAND} -DCORE_DIR=${root}/core -DMODULES_FILE=${root}/modules.cmake
       -P ${SOURCE_DIR}/cmake/CheckCoreModules.cmake)

core_tree(cycle "list(APPEND MLPT_CORE_MODULES a b c)\nset(MLPT_CORE_DEPS_a b)\nset(MLPT_CORE_DEPS_b c)\nset(MLPT_CORE_DEPS_c a)\n")
file(WRITE "${root}/core/a/a.hpp" "#include \"core/b/b.hpp\"\n")
file(WRITE "${root}/core/b/b.hpp" "#include \"core/c/c.hpp\"\n")
file(WRITE "${root}/core/c/c.hpp" "#include \"core/a/a.hpp\"\n")
expect(cycle 1 "modules include each other: a -> b -> c -> a"
       ${CMAKE_COMMAND} -DCORE_DIR=${root}/core -DMODULES_FILE=${root}/modules.cmake
       -P ${SOURCE_DIR}/cmake/CheckCoreModules.cmake)

core_tree(stray_folder "list(APPEND MLPT_CORE_MODULES a)\nset(MLPT_CORE_DEPS_a)\n")
file(WRITE "${root}/core/a/a.hpp" "#pragma once\n")
file(WRITE "${root}/core/z/z.cpp" "int z;\n")
expect(stray_folder 1 "folder core/z/ is no module"
       ${CMAKE_COMMAND} -DCORE_DIR=${root}/core -DMODULES_FILE=${root}/modules.cmake
       -P ${SOURCE_DIR}/cmake/CheckCoreModules.cmake)

# ---- citations ----
function(doc_tree name)
  set(root "${WORK_DIR}/${name}")
  file(REMOVE_RECURSE "${root}")
  file(WRITE "${root}/${D}/page.md" "# Page\n\n## 1. First\n\n### 1.2 Second\n\n## 2 Third\n")
  set(root "${root}" PARENT_SCOPE)
endfunction()

doc_tree(citations_resolve)
file(WRITE "${root}/core/x.cpp" "// ${D}/page.md ${S}1.2, ${S}2 and ${D}/page.md ${S}1-${S}2\n")
expect(citations_resolve 0 "2 section citations" ${CMAKE_COMMAND} -DSOURCE_DIR=${root}
       -P ${SOURCE_DIR}/cmake/CheckDocCitations.cmake)

doc_tree(missing_section)
file(WRITE "${root}/core/x.cpp" "// ${D}/page.md ${S}1.2-${S}3\n")
expect(missing_section 1 "core/x.cpp: cites ${D}/page.md ${S}3, which is no heading" ${CMAKE_COMMAND}
       -DSOURCE_DIR=${root} -P ${SOURCE_DIR}/cmake/CheckDocCitations.cmake)

doc_tree(page_outside_docs)
file(WRITE "${root}/plugins/p/y.hpp" "// benchmark.md ${S}4\n")
expect(page_outside_docs 1 "plugins/p/y.hpp: cites benchmark.md ${S}4, but there is no benchmark.md" ${CMAKE_COMMAND}
       -DSOURCE_DIR=${root} -P ${SOURCE_DIR}/cmake/CheckDocCitations.cmake)

doc_tree(missing_page)
file(WRITE "${root}/tests/z.py" "# see ${D}/gone.md\n")
expect(missing_page 1 "tests/z.py: names ${D}/gone.md, which does not exist" ${CMAKE_COMMAND}
       -DSOURCE_DIR=${root} -P ${SOURCE_DIR}/cmake/CheckDocCitations.cmake)

get_property(failures GLOBAL PROPERTY failures)
if(failures)
  message(FATAL_ERROR "${failures}")
endif()
message(STATUS "every case answered as expected")
