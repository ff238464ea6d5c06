# Removes from DEST the Python files that SOURCE no longer has (a module moved or deleted):
# `cmake -E copy_directory` only adds and overwrites, and a stale module left in the
# development package would still be imported.
file(GLOB_RECURSE built RELATIVE ${DEST} ${DEST}/*.py ${DEST}/*.pyi)
foreach(path ${built})
  if(NOT EXISTS ${SOURCE}/${path})
    file(REMOVE ${DEST}/${path})
  endif()
endforeach()
