"""tile"""
