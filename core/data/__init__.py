"""(map written as the package grows)"""
