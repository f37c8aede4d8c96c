package dv

import "github.com/RoaringBitmap/roaring/v2"

func newBitmap32() *roaring.Bitmap { return roaring.New() }
