# mlpt_add_subdirectories(<glob>...): add every matching folder that has a CMakeLists.txt, in name
# order. Each area (a plugin, a test area, a benchmark) owns its folder; no central list to edit.
function(mlpt_add_subdirectories)
  foreach(pattern IN LISTS ARGN)
    file(GLOB children LIST_DIRECTORIES true CONFIGURE_DEPENDS ${pattern})
    list(SORT children)
    foreach(child IN LISTS children)
      if(IS_DIRECTORY ${child} AND EXISTS ${child}/CMakeLists.txt)
        add_subdirectory(${child})
      endif()
    endforeach()
  endforeach()
endfunction()
